"""The LPD training script: its bfloat16 and float32 steps learn, and its joint loss is the
teacher-forced loss of one cell a step in a seeded random order."""

import dataclasses

import pytest
import torch

from tests.training_scripts import load_script


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_training_lowers_the_joint_loss(tmp_path, monkeypatch, precision):
    script = load_script("train_lpd_model")
    tiny = dataclasses.replace(script.LPD_CONFIG, decoder_embed_dim=32, decoder_depth=1, decoder_num_heads=1)
    monkeypatch.setattr(script, "LPD_CONFIG", tiny)
    monkeypatch.setattr(script, "LPD_BATCH", 4)
    g = torch.Generator().manual_seed(0)
    tokens, labels = torch.randint(8, (4, 256), generator=g), torch.arange(4)  # 8 of the 512 codes
    torch.manual_seed(3)
    before = script.joint_loss(script.LPD(tiny).eval(), tokens, labels, seed=0)
    model = script.train_lpd(tmp_path, 0, tokens, labels, steps=300, precision=precision)
    after = script.joint_loss(model, tokens, labels, seed=0)
    assert before > 6.0 and after < 2.5  # ln 8 = 2.08: it has found the 8 codes in use
    assert (tmp_path / "lpd.pt").exists()


def test_joint_loss_is_one_cell_a_step_in_a_seeded_order():
    script = load_script("train_lpd_model")
    tiny = dataclasses.replace(script.LPD_CONFIG, decoder_embed_dim=32, decoder_depth=1, decoder_num_heads=1)
    torch.manual_seed(0)
    model = script.LPD(tiny).eval()
    tokens, labels = torch.randint(512, (2, 256)), torch.tensor([1, 2])
    orders = torch.argsort(torch.rand(tokens.shape, generator=torch.Generator().manual_seed(7)), dim=1)
    with torch.no_grad():
        logp = model(tokens, labels, orders, [1] * 256).log_softmax(-1)
    expected = -logp.gather(-1, tokens.gather(1, orders)[..., None]).mean()
    assert script.joint_loss(model, tokens, labels, seed=7) == pytest.approx(float(expected), rel=1e-5)
    assert script.joint_loss(model, tokens, labels, seed=8) != pytest.approx(float(expected), rel=1e-5)
