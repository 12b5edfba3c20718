"""`generate`: the one entry point pipelines call, whatever the decoding method (LPD's included)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch

from mmspec.core.contracts import TokenModel
from mmspec.core.device import device_profile
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.auto.cost_curve import model_device, session_curve
from mmspec.decoding.config import DecodingConfig, LPDDecoding, as_lpd_decoding, lpd_refusal, parse_decoding
from mmspec.decoding.loop.ar import decode_ar
from mmspec.decoding.loop.jacobi import branch_options, decode_jacobi, extra_positions
from mmspec.decoding.loop.stopping import Stopping
from mmspec.decoding.lpd import check_guidance_schedule, decode_lpd
from mmspec.decoding.schedules import Raster
from mmspec.decoding.stats import DecodeStats


def as_decoding(decoding: str | DecodingConfig) -> DecodingConfig:
    """`decoding` as a `DecodingConfig` (the one grammar: `mmspec.decoding.names`); LPD's
    names are refused in one line (they decode an LPD model, not a `TokenModel`)."""
    config = parse_decoding(decoding)
    if isinstance(config, LPDDecoding):
        raise lpd_refusal(config)
    return config


def in_inference_mode(decode: Callable) -> Callable:
    """Runs a decode under `torch.inference_mode` and returns ordinary tensors (copies) that
    the caller may change in place. On a CPU the decoding loops run many small tensor
    operations, each of which costs more under `no_grad` (version counters, autograd
    dispatch): AR and every method gain (`benchmarks/perf/inference_mode.py`)."""
    @functools.wraps(decode)
    def wrapper(*args, **kwargs):
        with torch.inference_mode():
            tokens, stats = decode(*args, **kwargs)
        lengths = None if stats.lengths is None else stats.lengths.clone()
        return tokens.clone(), replace(stats, commit_iteration=stats.commit_iteration.clone(), lengths=lengths)
    return wrapper


@in_inference_mode
def generate(
    model: TokenModel,
    condition: Any,
    decoding: str | DecodingConfig | LPDDecoding = "auto",
    sampling: SamplingConfig | None = None,
    generator: torch.Generator | Sequence[torch.Generator] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    layout=None,
    *,
    stop_tokens: Sequence[int] = (),
    max_length: int | None = None,
    pad_token_id: int | None = None,
    processors: Sequence = (),
    on_commit: Callable[[torch.Tensor], None] | None = None,
    guidance_schedule: str | None = None,
) -> tuple[torch.Tensor, DecodeStats]:
    """Generates one sample per condition of the batch.

    Args:
        model (`TokenModel` or `GroupModel`): the generator (a `LlamaGenGPT`, say; an LPD
            model, `decodes_in_groups`, is decoded group by group).
        condition: what `model.start` takes (class labels `[B]` for c2i LlamaGen and LPD).
        decoding (`str`, `DecodingConfig` or `LPDDecoding`, *optional*, defaults to "auto"):
            the method, by name ("auto", "ar", "keyed", "sjd", "mc-sjd", "sjd+lantern", "mc-sjd+gsd",
            "zipar", "zipar+mc-sjd", ...: the grammar of `mmspec.decoding.names`) or as a
            config. An LPD model takes "lpd-<steps>" ("lpd-20", "lpd-32": LPD's group sizes)
            or "ar" (one cell per forward in LPD's order), and nothing else; other models
            refuse LPD's names.
        sampling (`SamplingConfig`, *optional*): CFG, temperature, top-k, top-p.
        generator (`torch.Generator` or a list of one per row, *optional*): the source of
            every random draw. It is read once, for a key per row (row i's from generator i
            when given a list); every draw after that is keyed noise of (key, position, ...)
            (`mmspec.core.noise`). So "ar", "keyed" and "auto" return the same tokens for the
            same generator whatever their window, drafts, branches, batch mates or thread
            count, and row i of a batch decoded with a list equals row i decoded alone with
            generator i. SJD and MC-SJD sample the model's distribution from the same noise;
            their tokens depend on their window and drafts.
        on_step (`Callable[[int, int], None]`, *optional*): called with (tokens committed
            per sequence, total) after each forward.
        layout (`TokenLayout`, *optional*): overrides `model.layout()`, e.g. to add the
            tokenizer's codebook for LANTERN and GSD.
        stop_tokens (`Sequence[int]`, *optional*): ids that end a sequence (each sequence of
            the batch at its own first one, which is kept); positions after it hold
            `pad_token_id` (default: the first stop id).
        max_length (`int`, *optional*): steps to generate at most (default: the layout's length).
        processors (`Sequence`, *optional*): history-dependent logits processors
            (`mmspec.core.processors`: repetition penalty, no-repeat n-gram, minimum length).
        on_commit (`Callable[[torch.Tensor], None]`, *optional*): called after each forward
            with the tokens committed so far, `[B, T]` (`[B, T, K]`), -1 where none yet
            (streaming); read it, do not keep or change it.
        guidance_schedule (`str`, *optional*): LPD only: how guidance grows along the
            order, "linear" (LPD's; the default) or "constant".

    Returns:
        tokens `[B, T]` (long; `[B, T, K]` for K tokens per step) and a `DecodeStats`
        (`stats.lengths`: each sequence's length).

    Example:
        >>> import torch
        >>> from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT
        >>> model = LlamaGenGPT(LlamaGenConfig(dim=64, n_layer=2, n_head=4, vocab_size=64, block_size=16, num_classes=10))
        >>> tokens, stats = generate(model, torch.tensor([1, 2]), decoding="mc-sjd",
        ...                          sampling=SamplingConfig(guidance_scale=2.0),
        ...                          generator=torch.Generator().manual_seed(0))
        >>> tokens.shape, stats.forward_passes <= 16
        (torch.Size([2, 16]), True)
    """
    sampling = sampling or SamplingConfig()
    if getattr(model, "decodes_in_groups", False):
        config = as_lpd_decoding(decoding, who="an LPD model")
        given = dict(layout=layout, stop_tokens=stop_tokens, max_length=max_length, pad_token_id=pad_token_id,
                     processors=processors, on_commit=on_commit)
        refused = [name for name, value in given.items() if value is not None and not (isinstance(value, Sequence) and not value)]
        if refused:
            raise ValueError(f"an LPD model decodes its whole grid group by group; generate takes no {', '.join(refused)} for it")
        tokens, stats = decode_lpd(model, condition, config, sampling, generator, on_step,
                                   check_guidance_schedule("linear" if guidance_schedule is None else guidance_schedule))
        return tokens, replace(stats, device=device_profile(model_device(model)).describe())
    if guidance_schedule is not None:
        raise ValueError(f"guidance_schedule is LPD's (its guidance grows along its order); {type(model).__name__} takes none")
    config = as_decoding(decoding)
    layout = layout or model.layout()
    if max_length is not None:
        layout = layout.truncate(max_length)
    profile = device_profile(model_device(model))  # what the device does, for the whole call
    if config.method == "ar" and isinstance(config.scheduler, Raster):
        session = model.start(condition, guided=sampling.guided)
        stopping = Stopping.at(stop_tokens, pad_token_id, session.batch_size, layout.length, session.prefill_logits().cond.device)
        tokens, stats = decode_ar(session, layout, sampling, generator, on_step, stopping, processors, on_commit)
        return tokens, replace(stats, device=profile.describe())
    extra = extra_positions(layout, config, profile)
    session = model.start(condition, guided=sampling.guided, extra_positions=extra)
    cost = None
    if config.chooses:  # the curve is measured on slots nothing has committed
        tree = any(setting is not None for setting in branch_options(config, profile))
        cost = session_curve(session, model, layout.tokens_per_step, layout.length, layout.length + extra, mode=config.cost,
                             tree=tree, profile=profile)
    stopping = Stopping.at(stop_tokens, pad_token_id, session.batch_size, layout.length, session.prefill_logits().cond.device)
    return decode_jacobi(session, layout, sampling, config, generator, on_step, stopping, processors, on_commit, cost, profile)
