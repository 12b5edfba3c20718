"""History-dependent logits processors: repetition penalty, no-repeat n-gram, minimum length.

Unlike the position-only sampling transform, these look at the tokens before the position
they score. Jacobi verification applies them at every window slot with the drafts before
it as its history, so slot j sees exactly what AR would see if the drafts before it are
accepted; the result stays exact. A processor is any callable

    processor(prompt [N, P] | None, history [N, T], positions [N], logits [N, V]) -> logits [N, V]

where `positions` are the scored positions, `history` the generated tokens (column i is
position i; -1 at and after the scored position, and wherever nothing is known) and
`prompt` the prompt's tokens (-1 = padding). They run on CFG-combined logits, before the allowed mask and the warpers, as
transformers orders its processors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


def seen_tokens(prompt: torch.Tensor | None, history: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Bool `[N, V]`: the tokens present in the prompt or the history."""
    tokens = history if prompt is None else torch.cat([prompt.to(history), history], 1)
    seen = torch.zeros(len(tokens), vocab_size + 1, dtype=torch.bool, device=tokens.device)
    seen.scatter_(1, torch.where(tokens >= 0, tokens, vocab_size), True)
    return seen[:, :vocab_size]


@dataclass(frozen=True)
class RepetitionPenalty:
    """CTRL's penalty (as transformers): a seen token's logit is divided by `penalty` when
    positive, multiplied when negative."""

    penalty: float

    def __post_init__(self):
        if not self.penalty > 0:
            raise ValueError(f"repetition penalty must be > 0, got {self.penalty}")

    def __call__(self, prompt, history, positions, logits):
        seen = seen_tokens(prompt, history, logits.shape[-1])
        penalised = torch.where(logits > 0, logits / self.penalty, logits * self.penalty)
        return torch.where(seen, penalised, logits)


@dataclass(frozen=True)
class NoRepeatNGram:
    """Bans every token that would complete an n-gram already present in the prompt or the history."""

    n: int

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"no-repeat n-gram size must be >= 1, got {self.n}")

    def __call__(self, prompt, history, positions, logits):
        if self.n == 1:
            return logits.masked_fill(seen_tokens(prompt, history, logits.shape[-1]), float("-inf"))
        seq = history if prompt is None else torch.cat([prompt.to(history), history], 1)  # [N, H]
        here = positions + (seq.shape[1] - history.shape[1])  # the scored position's index in seq
        if seq.shape[1] < self.n:
            return logits
        grams = seq.unfold(1, self.n, 1)  # [N, H - n + 1, n]
        idx = (here[:, None] - self.n + 1 + torch.arange(self.n - 1, device=seq.device)).clamp(min=0)
        tail = seq.gather(1, idx)  # the n - 1 tokens before the position
        j = torch.arange(grams.shape[1], device=seq.device)
        match = (grams[..., :-1] == tail[:, None]).all(-1) & (grams[..., -1] >= 0) & (j[None] + self.n <= here[:, None])
        match &= ((tail >= 0).all(-1) & (here >= self.n - 1))[:, None]
        rows, cols = match.nonzero(as_tuple=True)
        banned = torch.zeros_like(logits, dtype=torch.bool)
        banned[rows, grams[rows, cols, -1]] = True
        return logits.masked_fill(banned, float("-inf"))


@dataclass(frozen=True)
class MinLength:
    """Bans the stop tokens before `min_new_tokens` tokens have been generated."""

    min_new_tokens: int
    stop_tokens: Sequence[int]

    def __call__(self, prompt, history, positions, logits):
        ban = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
        ban[list(self.stop_tokens)] = True
        return logits.masked_fill((positions < self.min_new_tokens)[:, None] & ban, float("-inf"))


def apply_processors(processors, prompt, history, positions, logits):
    for processor in processors:
        logits = processor(prompt, history, positions, logits)
    return logits
