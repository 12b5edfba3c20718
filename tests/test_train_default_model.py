"""The default model's training script: the token stage continues an interrupted or shorter
encoding, and the edge weights of the frame VQ's loss pick out outlines."""

import pytest
import torch

from mmspec.tokenizers.llamagen_vq import LlamaGenVQ
from scripts import train_default_model as script


def test_token_stage_continues_where_the_saved_file_stops(tmp_path, monkeypatch):
    torch.manual_seed(0)
    vq = LlamaGenVQ(script.VQ_CONFIG).eval()  # random weights: the codes only need to be deterministic
    monkeypatch.setattr(script, "TOKEN_CHUNK", 4)
    resumed_dir, whole_dir = tmp_path / "resumed", tmp_path / "whole"
    resumed_dir.mkdir(), whole_dir.mkdir()

    first, _ = script.encode_tokens(resumed_dir, vq, 6)  # a first run that stopped after 6 images
    saved = torch.load(resumed_dir / "tokens.pt", weights_only=True)
    assert torch.equal(saved["tokens"], first)
    # mark the saved codes, to see that the rerun keeps them instead of encoding again
    torch.save({**saved, "tokens": torch.zeros_like(first)}, resumed_dir / "tokens.pt")
    resumed, labels = script.encode_tokens(resumed_dir, vq, 10)
    whole, whole_labels = script.encode_tokens(whole_dir, vq, 10)

    assert resumed.shape == whole.shape == (10, 256)
    assert (resumed[:6] == 0).all() and torch.equal(resumed[6:], whole[6:]) and torch.equal(whole[:6], first)
    assert torch.equal(labels, whole_labels) and labels.tolist() == list(range(10))
    # asking for fewer than are saved reads a prefix
    assert torch.equal(script.encode_tokens(whole_dir, vq, 3)[0], first[:3])


def test_edge_weights_single_out_outlines_and_leave_flat_images_alone():
    flat = torch.full((1, 3, 8, 8), 0.3)
    assert torch.equal(script.edge_weights(flat, 8.0), torch.ones(1, 1, 8, 8))
    square = flat.clone()
    square[:, 0, 2:6, 2:6] = 0.9  # a red square: an outline 0.6 high in one channel
    w = script.edge_weights(square, 8.0)
    assert float(w[0, 0, 1, 2]) == float(w[0, 0, 2, 1]) == pytest.approx(1 + 8 * 0.6)  # above and left of the corner
    assert w[0, 0, 3, 3] == 1 and w[0, 0, 0, 0] == 1  # inside and far outside: flat
    assert torch.equal(script.edge_weights(square, 0.0), torch.ones(1, 1, 8, 8))  # the image VQ's recipe
