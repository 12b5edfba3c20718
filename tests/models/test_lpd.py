import json
from pathlib import Path

import pytest
import torch

from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.lpd import generate_lpd
from mmspec.decoding.orders import LocalityOrder
from mmspec.decoding.lpd import linear_guidance
from mmspec.models.networks.lpd import LPD, LPDConfig, group_mask

FIXTURE = Path(__file__).parents[1] / "fixtures" / "lpd"


@pytest.fixture(scope="module")
def reference():
    config = LPDConfig.from_dict(json.loads((FIXTURE / "config.json").read_text()))
    model = LPD.from_checkpoint(FIXTURE / "lpd.pth", config)
    return model, torch.load(FIXTURE / "reference.pt", weights_only=True)


def test_teacher_forced_logits_match_the_original(reference):
    model, ref = reference
    logits = model(ref["tokens"], ref["labels"], ref["orders"], ref["group_sizes"].tolist())
    assert torch.allclose(logits, ref["logits"], atol=1e-5), (logits - ref["logits"]).abs().max()


@pytest.mark.parametrize("scale, key", [(3.0, "greedy_cfg3"), (1.0, "greedy_cfg1")])
def test_greedy_decoding_matches_the_original_sampler(reference, scale, key):
    model, ref = reference
    order = LocalityOrder(tuple(ref["group_sizes"].tolist()), grid_size=4)
    out = generate_lpd(model, ref["labels"], order, SamplingConfig(guidance_scale=scale, top_k=1), orders=ref["orders"])
    assert torch.equal(out.tokens, ref[key])
    assert out.forward_passes == 4


def test_cached_steps_equal_the_training_forward_in_both_cfg_halves(reference):
    model, ref = reference
    sizes = ref["group_sizes"].tolist()
    session = model.start(ref["labels"], ref["orders"], guided=True)
    cond, uncond, previous, done = [], [], None, 0
    for size in sizes:
        logits = session.step(previous, size)
        cond.append(logits.cond)
        uncond.append(logits.uncond)
        previous = ref["tokens"].gather(1, ref["orders"][:, done : done + size])
        done += size
    null = torch.full_like(ref["labels"], model.config.class_num)
    assert torch.allclose(torch.cat(cond, 1), ref["logits"], atol=1e-5)
    assert torch.allclose(torch.cat(uncond, 1), model(ref["tokens"], null, ref["orders"], sizes), atol=1e-5)


def test_session_rejects_steps_out_of_turn(reference):
    model, ref = reference
    session = model.start(ref["labels"], ref["orders"], guided=False)
    with pytest.raises(ValueError, match="feed the 0 tokens"):
        session.step(ref["tokens"][:, :1], 1)
    session.step(None, 3)
    with pytest.raises(ValueError, match="feed the 3 tokens"):
        session.step(None, 2)
    with pytest.raises(ValueError, match="does not fit"):
        session.step(ref["tokens"][:, :3], 14)


def test_group_mask_is_block_causal_with_queries_seeing_their_group():
    # context: class, cells of group 1 (two); queries: group 1 (two), group 2 (one)
    mask = group_mask(torch.tensor([0, 1, 1]), torch.tensor([1, 1, 2]))
    expected = torch.tensor([
        [1, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 0, 0, 1, 1, 0],
        [1, 0, 0, 1, 1, 0],
        [1, 1, 1, 0, 0, 1],
    ], dtype=torch.bool)
    assert torch.equal(mask, expected)


def test_linear_guidance_grows_from_one_to_the_scale():
    assert torch.allclose(linear_guidance(torch.tensor([0, 128, 256]), 256, 5.0), torch.tensor([1.0, 3.0, 5.0]))


def test_sampling_draws_only_from_the_generator(reference):
    model, ref = reference
    order = LocalityOrder(tuple(ref["group_sizes"].tolist()), grid_size=4)
    runs = [generate_lpd(model, ref["labels"], order, SamplingConfig(guidance_scale=2.0), torch.Generator().manual_seed(3))
            for _ in range(2)]
    torch.manual_seed(99)
    assert torch.equal(runs[0].tokens, runs[1].tokens) and torch.equal(runs[0].orders, runs[1].orders)
    step = runs[0].step_of_cell.gather(1, runs[0].orders)  # in order: 0, 1 1 1, 2 x5, 3 x7
    assert step[0].tolist() == [0, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3]


@pytest.mark.parametrize("fields, message", [
    (dict(img_size=100), "not a multiple of vqgan_stride"),
    (dict(decoder_embed_dim=30, decoder_num_heads=4), "not divisible"),
])
def test_bad_configs_are_one_line_errors(fields, message):
    with pytest.raises(ValueError, match=message):
        LPDConfig(**fields)


def test_a_checkpoint_of_another_shape_is_a_clear_error():
    state = torch.load(FIXTURE / "lpd.pth", weights_only=True)["model"]
    config = LPDConfig(img_size=64, vqgan_stride=16, decoder_embed_dim=32, decoder_depth=3, decoder_num_heads=2,
                       class_num=5, vqgan_vocab_size=24)
    with pytest.raises(ValueError, match="LPD checkpoint does not fit the config: missing keys: blocks.2"):
        LPD.from_checkpoint(state, config)
