"""Chameleon's VQGAN decoder: Meta's `vqgan.yaml` + `vqgan.ckpt` format loads without running
code and decodes as Meta's own `VQModel` does (`tests/fixtures/lumina_mgpt`, made by that code)."""

import argparse
from pathlib import Path

import pytest
import torch

from mmspec.tokenizers.chameleon_vqgan import ChameleonVQGANDecoder, VQGANConfig

FIXTURE = Path(__file__).parents[1] / "fixtures" / "lumina_mgpt"
TINY = VQGANConfig(n_embed=16, embed_dim=4, z_channels=8, ch=32, ch_mult=[1, 1, 2], num_res_blocks=1, attn_resolutions=[4],
                   resolution=16)


def test_meta_checkpoint_decodes_as_the_original():
    vq = ChameleonVQGANDecoder.from_checkpoint(FIXTURE / "vqgan.yaml", FIXTURE / "vqgan.ckpt")
    reference = torch.load(FIXTURE / "reference.pt", weights_only=True)
    assert vq.config.attn_resolutions == [8] and vq.config.num_res_blocks == 0
    torch.testing.assert_close(vq.decode(reference["vqgan_codes"]), reference["vqgan_pixels"], atol=1e-5, rtol=0)


def test_shapes_follow_the_levels():
    torch.manual_seed(0)
    vq = ChameleonVQGANDecoder(TINY).eval()
    assert TINY.downsample == 4
    codes = torch.randint(16, (2, 3, 5))
    out = vq.decode(codes)
    assert out.shape == (2, 3, 12, 20) and torch.isfinite(out).all()
    assert len(vq.decoder.up[2].attn) == 2 and len(vq.decoder.up[0].attn) == 0  # attention at resolution 4 only


def test_lightning_checkpoint_round_trips_skipping_encoder_and_loss(tmp_path):
    """A `{"state_dict": ...}` file with the encoder's and the loss's keys and training
    counters beside the weights, read with weights_only=True; then save/load as safetensors."""
    torch.manual_seed(0)
    vq = ChameleonVQGANDecoder(TINY).eval()
    state = dict(vq.state_dict())
    state["encoder.conv_in.weight"] = torch.zeros(32, 3, 3, 3)
    state["loss.discriminator.main.0.weight"] = torch.zeros(4, 3, 4, 4)
    torch.save({"state_dict": state, "epoch": 3, "global_step": 1000}, tmp_path / "vqgan.ckpt")
    (tmp_path / "vqgan.yaml").write_text(
        "model:\n  params:\n    n_embed: 16\n    embed_dim: 4\n    ddconfig:\n      z_channels: 8\n      ch: 32\n"
        "      ch_mult: [1, 1, 2]\n      num_res_blocks: 1\n      attn_resolutions: [4]\n      resolution: 16\n"
        "      out_ch: 3\n      in_channels: 3\n      double_z: false\n"
    )
    loaded = ChameleonVQGANDecoder.from_checkpoint(tmp_path / "vqgan.yaml", tmp_path / "vqgan.ckpt")
    codes = torch.randint(16, (1, 2, 2))
    assert torch.equal(loaded.decode(codes), vq.decode(codes))
    loaded.save_pretrained(tmp_path / "saved")
    again = ChameleonVQGANDecoder.from_pretrained(tmp_path / "saved")
    assert again.config == TINY and torch.equal(again.decode(codes), vq.decode(codes))


def test_errors_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        VQGANConfig.from_yaml(tmp_path / "vqgan.yaml")
    (tmp_path / "bad.yaml").write_text("model: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(ValueError, match="not a plain VQGAN yaml"):
        VQGANConfig.from_yaml(tmp_path / "bad.yaml")
    (tmp_path / "empty.yaml").write_text("model: {}\n")
    with pytest.raises(ValueError, match="ddconfig"):
        VQGANConfig.from_yaml(tmp_path / "empty.yaml")
    torch.save({"state_dict": {"decoder.conv_in.weight": torch.zeros(1)}}, tmp_path / "partial.ckpt")
    with pytest.raises(ValueError, match="missing keys"):
        ChameleonVQGANDecoder.from_checkpoint(FIXTURE / "vqgan.yaml", tmp_path / "partial.ckpt")
    # a class in the file (as Lightning's hyper-parameters may hold) needs code to unpickle
    torch.save({"state_dict": {"x": torch.zeros(1)}, "hparams": argparse.ArgumentParser}, tmp_path / "code.ckpt")
    with pytest.raises(ValueError, match="execute code"):
        ChameleonVQGANDecoder.from_checkpoint(FIXTURE / "vqgan.yaml", tmp_path / "code.ckpt")
    with pytest.raises(ValueError, match="no saved VQGAN"):
        ChameleonVQGANDecoder.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="multiples of 32"):
        VQGANConfig(ch=20)
    with pytest.raises(ValueError, match="codes must lie"):
        ChameleonVQGANDecoder(TINY).decode(torch.full((1, 1, 1), 16))
