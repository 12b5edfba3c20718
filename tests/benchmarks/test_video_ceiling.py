"""The ceiling benchmark: reconstructions go frame by frame; PSNR in dB."""

import math

import pytest
import torch

from benchmarks.studies import video_ceiling
from scripts import train_default_model


def test_through_vq_and_psnr(tmp_path):
    from mmspec.tokenizers.llamagen_vq import LlamaGenVQ

    torch.manual_seed(0)
    vq = LlamaGenVQ(train_default_model.VQ_CONFIG).eval()
    videos = torch.rand(2, 3, 3, 32, 32) * 2 - 1
    recon = video_ceiling.through_vq(vq, videos)
    assert recon.shape == videos.shape
    # frame by frame: the second video alone comes back the same
    assert torch.allclose(video_ceiling.through_vq(vq, videos[1:]), recon[1:], atol=1e-5)
    assert video_ceiling.psnr(videos, videos + 0.02) == pytest.approx(10 * math.log10(4 / 0.02**2), rel=1e-3)


def test_picture_has_a_labelled_row_per_video_and_reconstruction(tmp_path):
    from PIL import Image

    from mmspec.datasets.moving_shapes import CLASS_NAMES

    labels = torch.arange(8).repeat(2)
    real = torch.rand(16, 8, 3, 32, 32) * 2 - 1
    video_ceiling.save_picture(tmp_path / "vq.png", real, labels, list(CLASS_NAMES), {"frame VQ": real, "image VQ": -real})
    with Image.open(tmp_path / "vq.png") as picture:
        rows = len(video_ceiling.PICTURE_CLASSES) * 3
        assert picture.height == 3 * (rows * 34 + 2) and picture.width > 3 * (4 * 34 + 2)  # 4 frames a row, scale 3
