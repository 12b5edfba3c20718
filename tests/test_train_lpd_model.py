"""The LPD training script: its bfloat16 and float32 steps learn, its locality-order batches
come from the grid's symmetries of seeded orders, training can start from saved weights, and
its joint loss is the teacher-forced loss of one cell a step in a seeded random order."""

import dataclasses

import pytest
import torch

from mmspec.decoding.orders import GROUP_SIZES, LocalityOrder
from scripts import train_lpd_model as script


def tiny_config(script):
    return dataclasses.replace(script.LPD_CONFIG, decoder_embed_dim=32, decoder_depth=1, decoder_num_heads=1)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_training_lowers_the_joint_loss(tmp_path, monkeypatch, precision):
    tiny = tiny_config(script)
    monkeypatch.setattr(script, "LPD_CONFIG", tiny)
    monkeypatch.setattr(script, "LPD_BATCH", 4)
    g = torch.Generator().manual_seed(0)
    tokens, labels = torch.randint(8, (4, 256), generator=g), torch.arange(4)  # 8 of the 512 codes
    torch.manual_seed(3)
    before = script.joint_loss(script.LPD(tiny).eval(), tokens, labels, seed=0)
    steps = 150 if precision == "bf16" else 300  # bf16 autocast costs 3x on a CPU; 150 steps reach a loss of 1.84 here
    model = script.train_lpd(tmp_path, 0, tokens, labels, steps=steps, precision=precision)
    after = script.joint_loss(model, tokens, labels, seed=0)
    assert before > 6.0 and after < 2.5  # ln 8 = 2.08: it has found the 8 codes in use
    assert (tmp_path / "lpd.pt").exists()


def test_joint_loss_is_one_cell_a_step_in_a_seeded_order():
    tiny = tiny_config(script)
    torch.manual_seed(0)
    model = script.LPD(tiny).eval()
    tokens, labels = torch.randint(512, (2, 256)), torch.tensor([1, 2])
    orders = torch.argsort(torch.rand(tokens.shape, generator=torch.Generator().manual_seed(7)), dim=1)
    with torch.no_grad():
        logp = model(tokens, labels, orders, [1] * 256).log_softmax(-1)
    expected = -logp.gather(-1, tokens.gather(1, orders)[..., None]).mean()
    assert script.joint_loss(model, tokens, labels, seed=7) == pytest.approx(float(expected), rel=1e-5)
    assert script.joint_loss(model, tokens, labels, seed=8) != pytest.approx(float(expected), rel=1e-5)


def test_grid_symmetries_are_the_eight_distance_keeping_maps():
    maps = script.grid_symmetries(4)
    assert maps.shape == (8, 16) and len({tuple(m.tolist()) for m in maps}) == 8
    rc = torch.stack([torch.arange(16) // 4, torch.arange(16) % 4], -1)
    chebyshev = (rc[:, None] - rc[None]).abs().max(-1).values
    for m in maps:
        assert sorted(m.tolist()) == list(range(16))
        assert torch.equal(chebyshev[m][:, m], chebyshev)  # neighbours stay neighbours
    corner = torch.tensor([0, 3, 12, 15])
    assert all(set(m[corner].tolist()) == set(corner.tolist()) for m in maps)


def test_locality_pool_holds_each_seeded_order_under_the_eight_symmetries(monkeypatch):
    monkeypatch.setattr(script, "LOCALITY_POOL", 2)
    pool = script.locality_pool(20, seed=3)
    order = LocalityOrder.for_steps(20)
    assert pool.shape == (16, 256)
    assert torch.equal(pool[0], order.order(3000)) and torch.equal(pool[1], order.order(3001))
    assert all(sorted(o.tolist()) == list(range(256)) for o in pool)
    # the first group is one cell and every cell of the second group touches it, as in the original order
    rows, cols = pool // 16, pool % 16
    assert torch.all(torch.maximum((rows[:, 1:3] - rows[:, :1]).abs(), (cols[:, 1:3] - cols[:, :1]).abs()) == 1)


def test_training_starts_from_init_and_takes_locality_orders(tmp_path, monkeypatch):
    tiny = tiny_config(script)
    monkeypatch.setattr(script, "LPD_CONFIG", tiny)
    monkeypatch.setattr(script, "LPD_BATCH", 2)
    monkeypatch.setattr(script, "LOCALITY_POOL", 1)
    torch.manual_seed(1)
    init = script.LPD(tiny)
    tokens, labels = torch.randint(512, (4, 256)), torch.arange(4)
    untrained = script.train_lpd(tmp_path / "a", 0, tokens, labels, steps=0, precision="fp32", init=init)
    assert all(torch.equal(a, b) for a, b in zip(untrained.state_dict().values(), init.state_dict().values()))

    seen, forward = [], script.LPD.forward
    def spy(self, x, y, orders, sizes):
        seen.append((orders.clone(), tuple(sizes)))
        return forward(self, x, y, orders, sizes)
    monkeypatch.setattr(script.LPD, "forward", spy)
    (tmp_path / "b").mkdir()
    script.train_lpd(tmp_path / "b", 0, tokens, labels, steps=4, precision="fp32", locality_share=1.0, init=init)
    pools = {n: script.locality_pool(n, 0) for n in script.LOCALITY_STEPS}
    assert len(seen) == 4
    for orders, sizes in seen:
        steps = len(sizes)
        assert sizes == GROUP_SIZES[(256, steps)]
        assert all((pools[steps] == o).all(-1).any() for o in orders)
