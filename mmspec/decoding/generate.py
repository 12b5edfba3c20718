"""`generate`: the one entry point pipelines call, whatever the decoding method."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from mmspec.decoding.ar import decode_ar
from mmspec.decoding.contracts import TokenModel
from mmspec.decoding.sampling import SamplingConfig
from mmspec.decoding.stats import DecodeStats

DECODINGS = ("ar",)


@torch.no_grad()
def generate(
    model: TokenModel,
    condition: Any,
    decoding: str = "ar",
    sampling: SamplingConfig | None = None,
    generator: torch.Generator | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> tuple[torch.Tensor, DecodeStats]:
    """Generates one sample per condition of the batch.

    Args:
        model (`TokenModel`): the generator (a `LlamaGenGPT`, say).
        condition: what `model.start` takes (class labels `[B]` for c2i LlamaGen).
        decoding (`str`, *optional*, defaults to "ar"): the decoding method.
        sampling (`SamplingConfig`, *optional*): CFG, temperature, top-k, top-p.
        generator (`torch.Generator`, *optional*): the source of every random draw.
        on_step (`Callable[[int, int], None]`, *optional*): called with (committed, total)
            after each forward.

    Returns:
        tokens `[B, T]` (long) and a `DecodeStats`.

    Example:
        >>> import torch
        >>> from mmspec.models.llamagen import LlamaGenConfig, LlamaGenGPT
        >>> model = LlamaGenGPT(LlamaGenConfig(dim=64, n_layer=2, n_head=4, vocab_size=64, block_size=16, num_classes=10))
        >>> tokens, stats = generate(model, torch.tensor([1, 2]), sampling=SamplingConfig(guidance_scale=2.0),
        ...                          generator=torch.Generator().manual_seed(0))
        >>> tokens.shape, stats.forward_passes
        (torch.Size([2, 16]), 16)
    """
    sampling = sampling or SamplingConfig()
    if decoding not in DECODINGS:
        raise ValueError(f"unknown decoding {decoding!r}; choose from {', '.join(DECODINGS)}")
    session = model.start(condition, guided=sampling.guided)
    return decode_ar(session, model.layout(), sampling, generator, on_step)
