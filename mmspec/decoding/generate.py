"""`generate`: the one entry point pipelines call, whatever the decoding method."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from mmspec.decoding.ar import decode_ar
from mmspec.decoding.config import DecodingConfig
from mmspec.core.contracts import TokenModel
from mmspec.decoding.jacobi import decode_jacobi, extra_positions
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.stats import DecodeStats


def as_decoding(decoding: str | DecodingConfig) -> DecodingConfig:
    if isinstance(decoding, DecodingConfig):
        return decoding
    return DecodingConfig.from_name(decoding)


@torch.no_grad()
def generate(
    model: TokenModel,
    condition: Any,
    decoding: str | DecodingConfig = "mc-sjd",
    sampling: SamplingConfig | None = None,
    generator: torch.Generator | None = None,
    on_step: Callable[[int, int], None] | None = None,
    layout=None,
) -> tuple[torch.Tensor, DecodeStats]:
    """Generates one sample per condition of the batch.

    Args:
        model (`TokenModel`): the generator (a `LlamaGenGPT`, say).
        condition: what `model.start` takes (class labels `[B]` for c2i LlamaGen).
        decoding (`str` or `DecodingConfig`, *optional*, defaults to "mc-sjd"): the method,
            by name ("ar", "sjd", "mc-sjd", "sjd+lantern", "mc-sjd+gsd", "zipar",
            "zipar+mc-sjd", ...: see `mmspec.decoding.config.DECODINGS`) or as a config.
        sampling (`SamplingConfig`, *optional*): CFG, temperature, top-k, top-p.
        generator (`torch.Generator`, *optional*): the source of every random draw.
        on_step (`Callable[[int, int], None]`, *optional*): called with (tokens committed
            per sequence, total) after each forward.
        layout (`TokenLayout`, *optional*): overrides `model.layout()`, e.g. to add the
            tokenizer's codebook for LANTERN and GSD.

    Returns:
        tokens `[B, T]` (long) and a `DecodeStats`.

    Example:
        >>> import torch
        >>> from mmspec.models.llamagen import LlamaGenConfig, LlamaGenGPT
        >>> model = LlamaGenGPT(LlamaGenConfig(dim=64, n_layer=2, n_head=4, vocab_size=64, block_size=16, num_classes=10))
        >>> tokens, stats = generate(model, torch.tensor([1, 2]), decoding="mc-sjd",
        ...                          sampling=SamplingConfig(guidance_scale=2.0),
        ...                          generator=torch.Generator().manual_seed(0))
        >>> tokens.shape, stats.forward_passes <= 16
        (torch.Size([2, 16]), True)
    """
    sampling = sampling or SamplingConfig()
    config = as_decoding(decoding)
    layout = layout or model.layout()
    if config.method == "ar" and config.zipar_window is None:
        session = model.start(condition, guided=sampling.guided)
        return decode_ar(session, layout, sampling, generator, on_step)
    session = model.start(condition, guided=sampling.guided, extra_positions=extra_positions(layout, config))
    return decode_jacobi(session, layout, sampling, config, generator, on_step)
