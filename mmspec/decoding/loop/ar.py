"""Plain autoregressive decoding: one step per forward, the baseline every method is
measured against and the exact reference for the lossless ones. Each step is drawn by
Gumbel-max under the row's keyed noise (`mmspec.core.noise`), so the tokens are a function
of the rows' keys: the ones every method of the keyed family returns."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from mmspec.core.contracts import TokenSession
from mmspec.core.layout import TokenLayout
from mmspec.core.noise import Noise, as_noise
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.loop.active_rows import ActiveRows
from mmspec.decoding.stats import DecodeStats
from mmspec.decoding.steps import draw_step, forward_steps, prefill_steps, prompt_steps
from mmspec.decoding.loop.stopping import Stopping


def decode_ar(
    session: TokenSession,
    layout: TokenLayout,
    sampling: SamplingConfig,
    noise: Noise | torch.Generator | list | None = None,
    on_step: Callable[[int, int], None] | None = None,
    stopping: Stopping | None = None,
    processors=(),
    on_commit: Callable[[torch.Tensor], None] | None = None,
) -> tuple[torch.Tensor, DecodeStats]:
    """Samples `layout.length` steps one per forward, until every sequence has stopped.

    `noise`: the call's keyed noise, or the generator(s) its keys are drawn from.
    Returns tokens `[B, T]` (`[B, T, K]` for K tokens per step) and their DecodeStats.
    `on_step(committed, total)` is called after every forward (progress bars, callbacks),
    `on_commit(tokens)` with the tokens committed so far (streaming).
    """
    start = time.perf_counter()
    session = ActiveRows(session)
    B, T, K = session.batch_size, layout.length, layout.tokens_per_step
    logits = prefill_steps(session, K)
    device = logits.cond.device
    noise = as_noise(noise, B, device)
    noise.remember(1, K, logits.cond.shape[-1])
    stopping = stopping or Stopping.none(B, T, device)
    prompt = prompt_steps(session, K)
    tokens = torch.full((B, T, K), -1, dtype=torch.long, device=device)
    committed = torch.zeros(B, T, dtype=torch.bool, device=device)
    commit_iteration = torch.arange(T, device=device).expand(B, T).clone()

    t = 0
    while True:
        # 1. draw step t from the logits that predict it (the prefill's for t = 0)
        tokens[:, t] = draw_step(logits, t, layout, sampling, noise, tokens, committed, processors, prompt)
        committed[:, t] = True
        stopping.update(tokens, committed)
        done = stopping.done(committed)
        if on_step:
            on_step(int(done.sum()) // B, T)
        if on_commit:
            on_commit(tokens[..., 0] if K == 1 else tokens)
        if t == T - 1:
            break
        finished = done.all(1)
        count = int(finished.sum())
        if count == B:
            break
        if count > session.dropped:  # finished sequences leave the forwards
            session.drop(finished, count)
        # 2. forward it and commit its cache slot (its keys were computed on committed context)
        pos = torch.full((B, 1), t, dtype=torch.long, device=device)
        logits = forward_steps(session, tokens[:, t : t + 1], pos)
        session.commit(pos, torch.ones_like(pos, dtype=torch.bool))
        t += 1
    stats = DecodeStats(
        method="ar",
        exact=True,
        forward_passes=t + 1,
        tokens_committed=int(stopping.lengths.sum()) * K,
        wall_time_s=time.perf_counter() - start,
        commit_iteration=stopping.padded_iterations(commit_iteration),
        lengths=stopping.lengths.clone(),
    )
    tokens = stopping.padded(tokens)
    return (tokens[..., 0] if K == 1 else tokens), stats
