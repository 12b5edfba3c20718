"""Spoken digits: deterministic clips of espeak-ng speech, independent of how many are asked."""

import shutil

import pytest
import torch

from mmspec.datasets.spoken_digits import CLIP_SAMPLES, clip_settings, load_split

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is a Debian package (.ci/run installs it)")


def test_clips_are_seeded_per_index_and_split():
    audio, labels = load_split("heldout", 3, start=9)
    again, _ = load_split("heldout", 1, start=10)
    assert audio.shape == (3, CLIP_SAMPLES) and labels.tolist() == [9, 0, 1]
    assert torch.equal(audio[1], again[0]) and float(audio.abs().max()) <= 1.0
    assert clip_settings("train", 10) != clip_settings("heldout", 10)


def test_unknown_split_is_refused():
    with pytest.raises(ValueError, match="unknown split 'test'"):
        load_split("test", 1)
