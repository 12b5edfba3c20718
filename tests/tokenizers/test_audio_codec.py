"""The residual-VQ mel codec: each codebook codes what the ones before it left, codes
round-trip through save/load, decoding is deterministic and of the right length."""

import math

import pytest
import torch

from mmspec.tokenizers.audio_codec import MelCodec, MelCodecConfig


def tones(n: int = 24, samples: int = 8 * 352) -> torch.Tensor:
    """Chirps of random pitch and loudness, seeded: speech-like energy moving across mel bins."""
    g = torch.Generator().manual_seed(0)
    t = torch.arange(samples) / 22_050
    f0 = 100 + 400 * torch.rand(n, 1, generator=g)
    return (0.2 + 0.8 * torch.rand(n, 1, generator=g)) * torch.sin(2 * math.pi * f0 * t * (1 + 2 * t))


@pytest.fixture(scope="module")
def codec():
    return MelCodec.fit(tones(), MelCodecConfig(n_mels=16, codebook_size=16, kmeans_iters=10, griffin_lim_iters=4),
                        torch.Generator().manual_seed(0))


def test_every_codebook_lowers_the_quantisation_error(codec):
    features = (codec.log_mel(tones(8)) - codec.mean) / codec.std
    codes = codec.quantize(features)
    errors = [float((codec.dequantize(codes[:, :k]) - features).pow(2).mean()) for k in range(1, 5)]
    assert codes.shape == (8, 4, 8) and all(a > b for a, b in zip(errors, errors[1:]))


def test_decode_is_deterministic_and_frame_aligned(codec):
    codes = codec.encode(tones(2))
    a, b = codec.decode(codes), codec.decode(codes)
    assert a.shape == (2, 8 * 352) and torch.equal(a, b) and float(a.abs().max()) <= 0.9 + 1e-6


def test_save_load_round_trip(codec, tmp_path):
    codec.save_pretrained(tmp_path)
    again = MelCodec.from_pretrained(tmp_path)
    assert torch.equal(again.encode(tones(3)), codec.encode(tones(3)))


def test_bad_codes_are_refused(codec):
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 16\), got 0 to 16"):
        codec.decode(torch.tensor([[[0], [1], [2], [16]]]))
    with pytest.raises(ValueError, match="codes must be integer"):
        codec.decode(torch.zeros(1, 3, 2, dtype=torch.long))
