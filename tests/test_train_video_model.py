"""The video training script: its frame VQ trains on video frames and resumes without
rendering them again, its token cache continues where an interrupted run stopped, and the
first frames it trains on alone are the videos' own first 64 tokens."""

import pytest
import torch

from mmspec.tokenizers.llamagen_vq import LlamaGenVQ
from scripts import train_default_model
from scripts import train_video_model as script


def test_token_cache_continues_and_first_frames_are_video_prefixes(tmp_path, monkeypatch):
    monkeypatch.setattr(script, "TOKEN_CHUNK", 2)
    torch.manual_seed(0)
    vq = LlamaGenVQ(train_default_model.VQ_CONFIG).eval()  # random weights: codes need only be deterministic
    first, _ = script.encode_tokens(tmp_path / "tokens.pt", vq, 2, first=5)
    videos, labels = script.encode_tokens(tmp_path / "tokens.pt", vq, 3, first=5)  # continues after 2
    assert videos.shape == (3, script.GPT_CONFIG.block_size) and torch.equal(videos[:2], first)
    assert labels.tolist() == [5, 6, 7]
    frames, frame_labels = script.encode_tokens(tmp_path / "frames.pt", vq, 3, first=5, frames=1)
    assert frames.shape == (3, 64) and torch.equal(frames, videos[:, :64]) and torch.equal(frame_labels, labels)


def test_frame_vq_trains_on_every_frame_and_resumes_without_loading_them(tmp_path, monkeypatch):
    monkeypatch.setattr(train_default_model, "VQ_STEPS", 2)  # the image VQ's recipe, where train_vq reads its settings
    monkeypatch.setattr(train_default_model, "VQ_BATCH", 4)
    monkeypatch.setattr(script, "VQ_VIDEOS", 3)
    frames = script.vq_frames()
    assert frames.shape == (3 * script.NUM_FRAMES, 3, 32, 32) and frames.min() >= -1 and frames.max() <= 1
    calls = []

    def load():
        calls.append(1)
        return frames

    trained = script.train_vq(tmp_path, 0, load)
    assert calls == [1] and sorted(p.name for p in tmp_path.iterdir()) == ["vq.pt"]
    resumed = script.train_vq(tmp_path, 0, load)  # the stage is done: no frames rendered again
    assert calls == [1]
    assert all(torch.equal(a, b) for a, b in zip(trained.state_dict().values(), resumed.state_dict().values()))
    codes = resumed.encode(frames[:2])
    assert codes.shape == (2, 64) and codes.max() < resumed.config.codebook_size


def test_gpt_continues_from_init_weights_and_its_own_checkpoint_wins_on_resume(tmp_path, monkeypatch):
    tiny = script.VideoLlamaGenConfig(dim=32, n_layer=1, n_head=1, multiple_of=16, num_classes=script.NUM_CLASSES,
                                      vocab_size=512, frames=2, block_size=128)
    monkeypatch.setattr(script, "GPT_CONFIG", tiny)
    monkeypatch.setattr(script, "GPT_BATCH", 2)
    monkeypatch.setattr(script, "FRAME_BATCH", 2)
    g = torch.Generator().manual_seed(0)
    videos = (torch.randint(512, (4, 128), generator=g), torch.randint(script.NUM_CLASSES, (4,), generator=g))
    first = (videos[0][:, :64], videos[1])

    def weights(model):
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    torch.manual_seed(123)
    init = script.VideoLlamaGen(tiny)
    untouched = script.train_gpt(tmp_path / "a", 0, videos, first, 0, "fp32", False, init=init)
    assert torch.equal(weights(untouched), weights(init))  # no steps: the init's weights, not a fresh model's
    (tmp_path / "b").mkdir()
    trained = script.train_gpt(tmp_path / "b", 0, videos, first, 1, "fp32", False, init=init)
    moved = (weights(trained) - weights(init)).abs()
    assert 0 < moved.max() < 0.05  # one small step away from the init
    torch.manual_seed(7)
    resumed = script.train_gpt(tmp_path / "b", 0, videos, first, 1, "fp32", False, init=script.VideoLlamaGen(tiny))
    assert torch.equal(weights(resumed), weights(trained))  # the stage's checkpoint, not the new init


def test_init_from_refuses_the_stages_it_skips(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["train_video_model.py", "--init-from", "saved", "--stages", "classifier,gpt"])
    with pytest.raises(SystemExit) as exit_info:
        script.main()
    assert exit_info.value.code == 2
    assert "--init-from keeps the saved frame VQ and judge" in capsys.readouterr().err
