"""Plain autoregressive decoding: one token per forward, the baseline every method is
measured against and the exact reference for the lossless ones."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from mmspec.core.contracts import TokenLayout, TokenSession
from mmspec.core.sampling import SamplingConfig, sample, target_probs
from mmspec.decoding.stats import DecodeStats


def decode_ar(
    session: TokenSession,
    layout: TokenLayout,
    sampling: SamplingConfig,
    generator: torch.Generator | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> tuple[torch.Tensor, DecodeStats]:
    """Samples `layout.length` tokens one per forward.

    Returns tokens `[B, T]` and their DecodeStats. `on_step(committed, total)` is called
    after every forward (progress bars, callbacks).
    """
    start = time.perf_counter()
    B, T = session.batch_size, layout.length
    device = session.prefill_logits().cond.device
    tokens = torch.empty(B, T, dtype=torch.long, device=device)
    commit_iteration = torch.arange(T, device=device).expand(B, T).clone()

    # 1. the prefill predicts position 0
    pos = torch.zeros(B, 1, dtype=torch.long, device=device)
    tokens[:, :1] = sample(target_probs(session.prefill_logits(), pos, sampling, layout.allowed_at(pos)), generator)
    if on_step:
        on_step(1, T)
    for t in range(1, T):
        # 2. forward the last token; 3. commit it (its keys were computed on committed context)
        prev = pos
        logits = session.forward(tokens[:, t - 1 : t], prev)
        session.commit(prev, torch.ones_like(prev, dtype=torch.bool))
        # 4. sample the next one
        pos = prev + 1
        probs = target_probs(logits, pos, sampling, layout.allowed_at(pos))
        tokens[:, t : t + 1] = sample(probs, generator)
        if on_step:
            on_step(t + 1, T)
    stats = DecodeStats(
        method="ar",
        exact=True,
        forward_passes=T,
        tokens_committed=B * T,
        wall_time_s=time.perf_counter() - start,
        commit_iteration=commit_iteration,
    )
    return tokens, stats
