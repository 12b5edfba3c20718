"""The output of every image pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from diffusers.utils import BaseOutput

from mmspec.decoding.stats import DecodeStats


@dataclass
class ImagePipelineOutput(BaseOutput):
    """Attributes:
    images: list of PIL images, `np.ndarray [B, H, W, 3]` in [0, 1], `torch.Tensor [B, 3, H, W]`
        in [0, 1], or the token ids `[B, T]`, as `output_type` asked.
    stats (`list[DecodeStats]`): one per image (its forwards, commit order, method).
    tokens (`torch.Tensor`): long `[B, T]`, the generated token ids.
    """

    images: Any
    stats: list[DecodeStats]
    tokens: torch.Tensor
