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
- `Lookup(max_ngram, min_ngram, first, substitutions)`: prompt-lookup drafts: the token
  that followed an earlier occurrence of the n tokens before the position, in the prompt
  or the history, longest n first ("lookup": the latest occurrence; "phrase-lookup": the
  first, across one substituted word).
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
    """Prompt-lookup drafts: the token that followed an earlier occurrence of the n tokens
    before the position (in the prompt or the history), longest n first.

    Args:
        max_ngram, min_ngram: the n-gram sizes tried, longest first.
        first (`bool`): take the first occurrence (transformers' prompt lookup; text that
            follows an example) instead of the latest (the token's own recent context).
        substitutions (`bool`): when no n-gram matches, match the n tokens before the last
            one and take the token two after them, as if the last token were a word
            substituted in a repeated phrase ("on a black background" seen, "on a blue"
            written: draft "background").
    """

    max_ngram: int = 3
    min_ngram: int = 1
    first: bool = False
    substitutions: bool = False

    def __post_init__(self):
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"lookup n-gram sizes must satisfy 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")

    @property
    def name(self) -> str:
        return "phrase-lookup" if (self.first and self.substitutions) else "lookup"

    def propose(self, ctx: DraftContext, pos: torch.Tensor, u: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        hay = ctx.history if ctx.prompt is None else torch.cat([ctx.prompt.to(ctx.history), ctx.history], 1)  # [B, H, K]
        here = pos + (hay.shape[1] - ctx.history.shape[1])  # index of the position in `hay`
        out = torch.full((hay.shape[0], hay.shape[2]), -1, dtype=torch.long, device=hay.device)
        for skip in (0, 1) if self.substitutions else (0,):
            for n in range(self.max_ngram, self.min_ngram - 1, -1):
                found = self.follower(hay, here - skip, n, skip)
                out = torch.where((out < 0).all(-1, keepdim=True) & (found >= 0).all(-1, keepdim=True), found, out)
        return out

    def follower(self, hay: torch.Tensor, end: torch.Tensor, n: int, skip: int) -> torch.Tensor:
        """`[B, K]`: the token `skip + 1` places after an occurrence of the n tokens that end
        just before index `end [B]` of `hay [B, H, K]` (-1 = unknown), that occurrence being
        another, earlier one; -1 where there is none."""
        B, H, K = hay.shape
        span = H - n - skip  # occurrences followed by a token inside hay
        if span <= 0:
            return torch.full((B, K), -1, dtype=torch.long, device=hay.device)
        idx = ((end - n)[:, None] + torch.arange(n, device=hay.device)).clamp(min=0)
        gram = hay.gather(1, idx[..., None].expand(B, n, K))  # [B, n, K]
        known = (end - n >= 0) & (gram >= 0).all(-1).all(-1)
        windows = hay.unfold(1, n, 1).transpose(-1, -2)[:, :span]  # [B, span, n, K]
        follow = hay[:, n + skip : n + skip + span]  # [B, span, K]
        j = torch.arange(span, device=hay.device)
        match = (windows == gram[:, None]).all(-1).all(-1) & (follow >= 0).all(-1) & (j[None] + n < end[:, None])
        at = torch.where(match, j, span).amin(1) if self.first else torch.where(match, j, -1).amax(1)
        found = known & (at >= 0) & (at < span)
        picked = follow[torch.arange(B, device=hay.device), at.clamp(0, span - 1)]
        return torch.where(found[:, None], picked, -1)


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
                 "previous-step": Copy("step"), "lookup": Lookup(), "phrase-lookup": Lookup(first=True, substitutions=True)}


def drafter_from_name(name: str, fill: bool = True):
    """"random", "left", "above", "previous-frame", "previous-step", "lookup",
    "phrase-lookup", or several joined by "+" ("lookup+above"): the first that proposes
    wins; random fills the rest unless `fill` is False (then a slot may get no draft)."""
    parts = name.split("+") if isinstance(name, str) else []
    if not parts or any(p not in DRAFTER_NAMES for p in parts):
        raise ValueError(f"unknown draft init {name!r}; choose from {', '.join(DRAFTER_NAMES)} or several joined by '+'")
    drafters = tuple(DRAFTER_NAMES[p] for p in parts if p != "random") + ((Random(),) if fill or "random" in parts else ())
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
