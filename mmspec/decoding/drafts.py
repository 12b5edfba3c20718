"""Drafters: the first draft of a window slot that has none yet, as small objects.

In the spirit of transformers' `CandidateGenerator`, a drafter proposes a token for a
position from what is known there: `history` (committed tokens and the current drafts,
-1 where none) and the prompt's tokens when the model has them. It returns -1 where it
has nothing to propose; `FirstOf` combines drafters, the first proposal wins. Every
drafter is deterministic given the history, except `Random`, which inverts the CDF at the
uniform it is given: a draft is a point mass given everything before it, so its q is
one-hot and SJD and MC-SJD stay exact whatever the drafter.

- `Random()`: uniform over the tokens the layout allows (the SJD paper's default);
- `Copy(axis)`: the token one step back along an axis: "col" (left), "row" (above),
  "frame" (the previous frame), "step" (the previous step of the same codebook);
- `Lookup(max_ngram, min_ngram)`: prompt-lookup decoding: the token that followed the
  latest earlier occurrence of the n tokens before the position, in the prompt or the
  history, longest n first.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmspec.core.layout import TokenLayout
from mmspec.core.sampling import categorical, uniforms


@dataclass
class DraftContext:
    """What a drafter may look at. `history` long `[B, T, K]` (-1 = unknown),
    `prompt` long `[B, P, K]` (-1 = padding) or None."""

    layout: TokenLayout
    history: torch.Tensor
    prompt: torch.Tensor | None


@dataclass(frozen=True)
class Random:
    name = "random"

    def propose(self, ctx: DraftContext, pos: torch.Tensor, u: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        """Tokens `[B, K]` for positions `pos [B]` from uniforms `u [B, K]`; `allowed [B, K, V]`."""
        weights = torch.ones(*u.shape, ctx.layout.vocab_size, device=u.device) if allowed is None else allowed.float()
        return categorical(weights, u)


@dataclass(frozen=True)
class Copy:
    axis: str
    distance: int = 1

    @property
    def name(self) -> str:
        named = {"col": "left", "row": "above", "frame": "previous-frame", "step": "previous-step"}
        return named.get(self.axis, f"copy-{self.axis}") if self.distance == 1 else f"copy-{self.axis}-{self.distance}"

    def propose(self, ctx: DraftContext, pos: torch.Tensor, u: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        source = ctx.layout.neighbour(self.axis, self.distance).to(pos.device)[pos]  # [B]
        copied = ctx.history[torch.arange(len(pos), device=pos.device), source.clamp(min=0)]  # [B, K]
        return torch.where((source >= 0)[:, None], copied, -1)


@dataclass(frozen=True)
class Lookup:
    max_ngram: int = 3
    min_ngram: int = 1

    name = "lookup"

    def __post_init__(self):
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"lookup n-gram sizes must satisfy 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")

    def propose(self, ctx: DraftContext, pos: torch.Tensor, u: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        hay = ctx.history if ctx.prompt is None else torch.cat([ctx.prompt.to(ctx.history), ctx.history], 1)  # [B, H, K]
        B, H, K = hay.shape
        here = pos + (H - ctx.history.shape[1])  # index of the position in `hay`
        out = torch.full((B, K), -1, dtype=torch.long, device=hay.device)
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if H <= n:
                continue
            starts = here - n  # the n-gram before the position
            idx = (starts[:, None] + torch.arange(n, device=hay.device)).clamp(min=0)
            gram = hay.gather(1, idx[..., None].expand(B, n, K))  # [B, n, K]
            known = (starts >= 0) & (gram >= 0).all(-1).all(-1)
            windows = hay.unfold(1, n, 1).transpose(-1, -2)[:, : H - n]  # [B, H - n, n, K]: each followed by a token
            follow = hay[:, n:]  # [B, H - n, K]
            j = torch.arange(H - n, device=hay.device)
            match = (windows == gram[:, None]).all(-1).all(-1) & (follow >= 0).all(-1) & (j[None] + n < here[:, None])
            last = torch.where(match, j, -1).amax(1)  # the latest occurrence
            found = known & (last >= 0) & (out < 0).all(-1)
            out = torch.where(found[:, None], follow[torch.arange(B, device=hay.device), last.clamp(min=0)], out)
        return out


@dataclass(frozen=True)
class FirstOf:
    """The first drafter that proposes an allowed token wins, position by position."""

    drafters: tuple

    @property
    def name(self) -> str:
        names = [d.name for d in self.drafters]
        return "+".join(names[:-1] if names[-1] == "random" and len(names) > 1 else names)

    def propose(self, ctx: DraftContext, pos: torch.Tensor, u: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        out = torch.full_like(u, -1, dtype=torch.long)
        for drafter in self.drafters:
            proposal = keep_allowed(drafter.propose(ctx, pos, u, allowed), allowed)
            out = torch.where((out < 0) & (proposal >= 0), proposal, out)
        return out


def keep_allowed(tokens: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """`tokens [B, K]` where `allowed [B, K, V]` allows them, else -1."""
    if allowed is None:
        return tokens
    ok = (tokens >= 0) & allowed.gather(-1, tokens.clamp(min=0)[..., None])[..., 0]
    return torch.where(ok, tokens, -1)


DRAFTER_NAMES = {"random": Random(), "left": Copy("col"), "above": Copy("row"), "previous-frame": Copy("frame"),
                 "previous-step": Copy("step"), "lookup": Lookup()}


def drafter_from_name(name: str):
    """"random", "left", "above", "previous-frame", "previous-step", "lookup", or several
    joined by "+" ("lookup+above"): the first that proposes wins, random fills the rest."""
    parts = name.split("+") if isinstance(name, str) else []
    if not parts or any(p not in DRAFTER_NAMES for p in parts):
        raise ValueError(f"unknown draft init {name!r}; choose from {', '.join(DRAFTER_NAMES)} or several joined by '+'")
    drafters = tuple(DRAFTER_NAMES[p] for p in parts if p != "random") + (Random(),)
    return drafters[0] if len(drafters) == 1 else FirstOf(drafters)


def first_drafts(
    drafter,
    history: torch.Tensor,  # [B, T, K] long: committed tokens and current drafts, -1 where none
    positions: torch.Tensor,  # [B, J] long: positions to draft, -1 = skip
    layout: TokenLayout,
    prompt: torch.Tensor | None,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """Drafts `[B, J, K]` for `positions`, filled left to right so that a copy or a lookup
    can take the draft just placed; writes them into `history` as it goes. -1 where skipped."""
    B, J = positions.shape
    K = history.shape[-1]
    out = torch.full((B, J, K), -1, dtype=torch.long, device=history.device)
    u = uniforms((B, J, K), generator, history.device)
    rows = torch.arange(B, device=history.device)
    ctx = DraftContext(layout, history, prompt)
    for j in range(J):
        pos = positions[:, j]
        live = pos >= 0
        if not bool(live.any()):
            continue
        safe = pos.clamp(min=0)
        allowed = layout.allowed_at(safe)
        if allowed is not None and K == 1:
            allowed = allowed[:, None]
        draft = keep_allowed(drafter.propose(ctx, safe, u[:, j], allowed), allowed)
        draft = torch.where(live[:, None], draft, -1)
        out[:, j] = draft
        history[rows[live], safe[live]] = draft[live]
    return out
