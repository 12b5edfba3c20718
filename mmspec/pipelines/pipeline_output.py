"""The outputs of the pipelines: images, and clips of speech."""

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


@dataclass
class SpeechPipelineOutput(BaseOutput):
    """The output of every text-to-speech pipeline (Orpheus-format, Dia): clips end where the
    model stops, so each has its own length.

    Attributes:
        audios (`list`): one float waveform `[samples]` in [-1, 1] per clip (`torch.Tensor` or
            `np.ndarray`, as `output_type` asked), or its generated tokens for "tokens".
        sample_rate (`int`): samples per second of `audios`.
        stats (`list[DecodeStats]`): one per clip.
        tokens (`torch.Tensor`): long, the generated tokens of the batch (`[B, T]`, or `[B, T, K]`
            for K codebooks a step), padded after each clip's end.
        codes (`list`): per clip, the codec codes its waveform was decoded from.
    """

    audios: list
    sample_rate: int
    stats: list[DecodeStats]
    tokens: torch.Tensor
    codes: list
