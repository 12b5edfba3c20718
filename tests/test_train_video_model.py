"""The video training script: its token cache continues where an interrupted run stopped,
and the first frames it trains on alone are the videos' own first 64 tokens."""

import torch

from tests.training_scripts import load_script


def test_token_cache_continues_and_first_frames_are_video_prefixes(tmp_path, monkeypatch):
    script = load_script("train_video_model")
    monkeypatch.setattr(script, "TOKEN_CHUNK", 2)
    vq = script.load_vq().eval()
    first, _ = script.encode_tokens(tmp_path / "tokens.pt", vq, 2, first=5)
    videos, labels = script.encode_tokens(tmp_path / "tokens.pt", vq, 3, first=5)  # continues after 2
    assert videos.shape == (3, script.GPT_CONFIG.block_size) and torch.equal(videos[:2], first)
    assert labels.tolist() == [5, 6, 7]
    frames, frame_labels = script.encode_tokens(tmp_path / "frames.pt", vq, 3, first=5, frames=1)
    assert frames.shape == (3, 64) and torch.equal(frames, videos[:, :64]) and torch.equal(frame_labels, labels)
