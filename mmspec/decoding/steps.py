"""The engine works on steps of K tokens (`[B, n, K]` tokens, `[B, n, K, V]` logits)
whatever the model; these helpers meet a session and a layout where they are: sessions
of one token per step take `[B, n]` and return `[B, n, V]`."""

from __future__ import annotations

import torch

from mmspec.core.contracts import GuidedLogits, TokenSession
from mmspec.core.layout import TokenLayout
from mmspec.core.processors import apply_processors
from mmspec.core.noise import Noise
from mmspec.core.sampling import SamplingConfig, guided_logits, keyed_scores


def as_steps(logits: GuidedLogits, K: int) -> GuidedLogits:
    if K > 1:
        return logits
    return GuidedLogits(logits.cond[..., None, :], None if logits.uncond is None else logits.uncond[..., None, :], logits.hidden)


def forward_steps(session: TokenSession, tokens: torch.Tensor, positions: torch.Tensor, segments=None, tree=None) -> GuidedLogits:
    """Runs `tokens [B, n, K]` (under tree attention with `tree`); logits `[B, n, K, V]`."""
    K = tokens.shape[-1]
    tokens = tokens[..., 0] if K == 1 else tokens
    logits = session.forward(tokens, positions, segments) if tree is None else session.forward(tokens, positions, tree=tree)
    return as_steps(logits, K)


def prefill_steps(session: TokenSession, K: int) -> GuidedLogits:
    return as_steps(session.prefill_logits(), K)


def allowed_steps(layout: TokenLayout, positions: torch.Tensor) -> torch.Tensor | None:
    """Bool `[..., K, V]` allowed-token mask at `positions [...]`, or None."""
    allowed = layout.allowed_at(positions)
    return allowed[..., None, :] if allowed is not None and layout.tokens_per_step == 1 else allowed


def prompt_steps(session: TokenSession, K: int) -> torch.Tensor | None:
    """The session's prompt tokens as `[B, P, K]` (-1 = padding), or None."""
    prompt = getattr(session, "prompt_tokens", None)
    return None if prompt is None else prompt.reshape(prompt.shape[0], prompt.shape[1], K)


def step_logits(logits: GuidedLogits, predicted: torch.Tensor, sampling: SamplingConfig, processors=(), prompt=None,
                history=None) -> torch.Tensor:
    """CFG-combined logits `[B, n, K, V]` at the `predicted` positions `[B, n]`, with the
    history-dependent processors applied (`history [B, n, T]`: what each entry has seen)."""
    combined = guided_logits(logits, predicted, sampling)
    if not processors:
        return combined
    if combined.shape[-2] != 1:
        raise ValueError("logits processors score one token per step; this layout has several")
    B, n = predicted.shape
    flat_prompt = None if prompt is None else prompt[..., 0].repeat_interleave(n, 0)
    out = apply_processors(processors, flat_prompt, history.reshape(B * n, -1), predicted.reshape(-1),
                           combined.reshape(B * n, -1))
    return out.view_as(combined)


def keyed_draw(logits: torch.Tensor, positions: torch.Tensor, layout: TokenLayout, sampling: SamplingConfig, noise: Noise,
               rows: torch.Tensor) -> torch.Tensor:
    """Steps `[N, n, K]` drawn by Gumbel-max from CFG-combined `logits [N, n, K, V]` that
    predict `positions [N, n]` of batch rows `rows [N]`: AR's draw for the row's key."""
    scores, columns = keyed_scores(logits, sampling, allowed_steps(layout, positions))
    return noise.top(scores, rows, positions, greedy=sampling.temperature == 0, tokens=columns)[..., 0]


def draw_step(logits: GuidedLogits, position: int, layout: TokenLayout, sampling: SamplingConfig, noise: Noise,
              tokens: torch.Tensor, committed: torch.Tensor, processors=(), prompt=None) -> torch.Tensor:
    """Step `position` drawn as AR draws it from the logits that predict it: `[B, K]`.
    `tokens [B, T, K]` and `committed [B, T]` are the history the processors see."""
    B = committed.shape[0]
    pos = torch.full((B, 1), position, dtype=torch.long, device=committed.device)
    history = torch.where(committed, tokens[..., 0], -1)[:, None] if processors else None
    combined = step_logits(logits, pos, sampling, processors, prompt, history)
    return keyed_draw(combined, pos, layout, sampling, noise, torch.arange(B, device=pos.device))[:, 0]
