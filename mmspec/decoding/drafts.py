"""Drafters: the first draft of a window slot that has none yet, as small objects.

In the spirit of transformers' `CandidateGenerator`, a drafter proposes a token for a
position from what is known there: `history` (committed tokens and the current drafts,
-1 where none) and the prompt's tokens when the model has them. It returns -1 where it
has nothing to propose; `FirstOf` combines drafters, the first proposal wins. Every
drafter is deterministic given the history, except `Random`, which inverts the CDF at the
uniform it is given, or under keyed decoding takes the Gumbel winner of the uniform
distribution under the slot's own keyed noise (which matches the target's winner more often
than an independent draw: the Gumbel coupling). A draft is a point mass given everything
before it, so its q is one-hot and SJD and MC-SJD stay exact whatever the drafter.

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
from functools import cached_property

import torch

from mmspec.core.layout import TokenLayout
from mmspec.core.sampling import SamplingConfig, categorical, keyed_scores


@dataclass
class DraftContext:
    """What a drafter may look at. `history` long `[B, T, K]` (-1 = unknown),
    `prompt` long `[B, P, K]` (-1 = padding) or None. `run [B]`, when given, is where
    lookup copied the draft before (an index into its reference + prompt + history, -1 =
    none): the next slot continues that phrase without searching again."""

    layout: TokenLayout
    history: torch.Tensor
    prompt: torch.Tensor | None
    run: torch.Tensor | None = None
    text: torch.Tensor | None = None  # [B, P + T, K]: the prompt, then the history

    def __post_init__(self):
        """Joins prompt and history once; `history` becomes a view into `text`, so drafts
        written into it show in the text without joining again."""
        if self.text is None:
            self.text = self.history if self.prompt is None else torch.cat([self.prompt.to(self.history), self.history], 1)
            self.history = self.text[:, self.text.shape[1] - self.history.shape[1]:]


@dataclass(frozen=True)
class Random:
    name = "random"

    def sources(self, layout: TokenLayout, pos: torch.Tensor) -> torch.Tensor:
        """The positions a proposal at `pos` reads (none: `[..., 0]`); see `first_drafts`."""
        return pos.new_empty(*pos.shape, 0)

    def propose(self, ctx: DraftContext, pos: torch.Tensor, u: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        """Tokens `[B, K]` for positions `pos [B]` (or `[B, J, K]` for `[B, J]`) from uniforms
        `u [B, K]`; keyed, `u` is long and holds the drafts already (`uniform_winner`);
        `allowed [B, K, V]`."""
        if not u.is_floating_point():
            return u
        weights = torch.ones(*u.shape, ctx.layout.vocab_size, device=u.device) if allowed is None else allowed.float()
        return categorical(weights, u)


def uniform_winner(noise, rows: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor | None, codebooks: int,
                   vocab_size: int) -> torch.Tensor:
    """Long `[N, J, K]`: the uniform distribution's Gumbel-max token over the allowed ones
    (`allowed [N, J, K, V]` bool or None) at `positions [N, J]` of `rows [N]`, under the
    slots' keyed noise (for the allowed tokens only when they are few: `keyed_scores`)."""
    N, J = positions.shape
    scores, columns = keyed_scores(torch.zeros(N, J, codebooks, vocab_size, device=positions.device), SamplingConfig(), allowed)
    return noise.top(scores, rows, positions, tokens=columns)[..., 0]


@dataclass(frozen=True)
class Copy:
    axis: str
    distance: int = 1

    @property
    def name(self) -> str:
        named = {"col": "left", "row": "above", "frame": "previous-frame", "step": "previous-step"}
        return named.get(self.axis, f"copy-{self.axis}") if self.distance == 1 else f"copy-{self.axis}-{self.distance}"

    def sources(self, layout: TokenLayout, pos: torch.Tensor) -> torch.Tensor:
        return layout.neighbour(self.axis, self.distance).to(pos.device)[pos][..., None]

    def propose(self, ctx: DraftContext, pos: torch.Tensor, u: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        layout = ctx.layout
        source = layout.neighbour(self.axis, self.distance).to(pos.device)[pos]  # [B] or [B, J]
        rows = torch.arange(len(pos), device=pos.device).view(-1, *([1] * (pos.dim() - 1)))
        if layout.prompt_frames and ctx.prompt is not None:  # the first frame copies the prompt's last one
            back = layout.prompt_source(self.axis, self.distance).to(pos.device)[pos]
            P = ctx.text.shape[1] - ctx.history.shape[1]
            in_prompt = (back > 0) & (back <= P)
            text = ctx.text[rows, torch.where(in_prompt, P - back, P + source.clamp(min=0))]
            return torch.where(((source >= 0) | in_prompt)[..., None], text, -1)
        copied = ctx.history[rows, source.clamp(min=0)]  # [B, (J,) K]
        return torch.where((source >= 0)[..., None], copied, -1)


@dataclass(frozen=True)
class Lookup:
    """Prompt-lookup drafts: the token that followed an earlier occurrence of the n tokens
    before the position (in the prompt or the history), longest n first.

    Args:
        max_ngram, min_ngram: the n-gram sizes tried, longest first.
        first (`bool`): take the first occurrence (transformers' prompt lookup; text that
            follows an example) instead of the latest (the token's own recent context).
        substitutions (`bool`): an occurrence may also match n of the n + 1 tokens before
            the position, one word substituted anywhere among them; it ranks below an
            exact match of n and above one of n - 1 ("so the circle is easy" seen, "so the
            star is" written: draft "easy", not what followed the latest "is").

        reference (`tuple[int, ...]`): token ids of texts to copy from besides the prompt
            and the history (-1 between texts; one token per step): a datastore of text the
            model is known to write, searched first, as REST (He et al., 2023) retrieves
            drafts. Drafts stay one-hot given the past, so exactness is kept.

    Inside one drafting pass (`first_drafts`) the slots after a match copy the phrase that
    follows it, as transformers' prompt lookup copies a run, and search again only where
    the phrase ends: one search per window instead of one per slot. A word placed in
    between by someone else (a hint) counts as substituted, and the phrase goes on.
    """

    max_ngram: int = 3
    min_ngram: int = 1
    first: bool = False
    substitutions: bool = False
    reference: tuple[int, ...] = ()

    def __post_init__(self):
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"lookup n-gram sizes must satisfy 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")

    @property
    def name(self) -> str:
        return "phrase-lookup" if (self.first and self.substitutions) else "lookup"

    @cached_property
    def reference_ids(self) -> torch.Tensor:
        """The reference and a -1 that keeps its last n-gram apart from the prompt's first."""
        return torch.tensor(self.reference + (-1,)) if self.reference else torch.zeros(0, dtype=torch.long)

    def propose(self, ctx: DraftContext, pos: torch.Tensor, u: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        text = ctx.text  # [B, P + T, K]
        B, K = text.shape[0], text.shape[2]
        reference = self.reference_ids.to(text.device)[None, :, None].expand(B, -1, K)  # searched first
        offset = reference.shape[1]
        here = pos + offset + text.shape[1] - ctx.history.shape[1]  # the position's index in reference + text
        rows = torch.arange(B, device=pos.device)

        def token_at(index: torch.Tensor) -> torch.Tensor:
            in_text = text[rows, (index - offset).clamp(0, text.shape[1] - 1)]
            return in_text if not offset else torch.where((index < offset)[:, None], reference[rows, index.clamp(0, offset - 1)], in_text)

        source, token = torch.full_like(pos, -1), None
        if ctx.run is not None:  # continue the phrase copied into the slot before
            nxt = ctx.run + 1
            token = token_at(nxt)
            source = torch.where((ctx.run >= 0) & (nxt < here) & (token >= 0).all(-1), nxt, -1)
        if token is None or bool((source < 0).any()):
            source = torch.where(source >= 0, source, self.search(torch.cat([reference, text], 1), here))
            token = token_at(source)
        if ctx.run is not None:
            ctx.run.copy_(source)
        return torch.where((source >= 0)[:, None], token, -1)

    def search(self, hay: torch.Tensor, here: torch.Tensor) -> torch.Tensor:
        """`[B]`: the index in `hay [B, H, K]` of the token to copy for position `here [B]`
        (the best-ranked earlier occurrence's follower), -1 where none."""
        B, H, K = hay.shape
        device = hay.device
        span = self.max_ngram + int(self.substitutions)
        back = torch.arange(1, span + 1, device=device)
        # candidate i copies hay[i]; compare the span tokens before i with those before `here`
        i = torch.arange(H, device=device)
        before_i = (i[:, None] - back).clamp(min=0)  # [H, span]
        before_here = here[:, None] - back  # [B, span]
        theirs = hay[:, before_i]  # [B, H, span, K]
        ours = hay.gather(1, before_here.clamp(min=0)[..., None].expand(B, span, K))  # [B, span, K]
        known = (i[:, None] >= back)[None] & (before_here >= 0)[:, None] & (ours >= 0).all(-1)[:, None]
        same = (theirs == ours[:, None]).all(-1) & known  # [B, H, span]
        exact = same.long().cumprod(-1).sum(-1).clamp(max=self.max_ngram)  # [B, H]
        score = torch.where(exact >= self.min_ngram, 2 * exact + 1, 0)  # ranks: exact n above n of n + 1
        if self.substitutions:
            n = torch.arange(1, self.max_ngram + 1, device=device)
            hits = same.long().cumsum(-1)[..., n]  # matches among the n + 1 tokens before
            near = torch.where(hits >= n, n, 0).amax(-1)
            score = torch.maximum(score, torch.where(near >= self.min_ngram, 2 * near, 0))
        score = torch.where((i[None] < here[:, None]) & (hay >= 0).all(-1), score, 0)
        order = H - 1 - i if self.first else i  # ties: the first or the latest occurrence
        best = (score * H + order).argmax(-1)
        return torch.where(score.gather(1, best[:, None])[:, 0] > 0, best, -1)


@dataclass(frozen=True)
class FirstOf:
    """The first drafter that proposes an allowed token wins, position by position."""

    drafters: tuple

    @property
    def name(self) -> str:
        names = [d.name for d in self.drafters]
        return "+".join(names[:-1] if names[-1] == "random" and len(names) > 1 else names)

    def sources(self, layout: TokenLayout, pos: torch.Tensor) -> torch.Tensor | None:
        found = [getattr(d, "sources", lambda *_: None)(layout, pos) for d in self.drafters]
        return None if any(f is None for f in found) else torch.cat(found, -1)

    def propose(self, ctx: DraftContext, pos: torch.Tensor, u: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        out = torch.full(u.shape[:pos.dim() + 1], -1, dtype=torch.long, device=u.device)
        for drafter in self.drafters:
            proposal = keep_allowed(drafter.propose(ctx, pos, u, allowed), allowed)
            out = torch.where((out < 0) & (proposal >= 0), proposal, out)
        return out


def draws_at_random(drafter) -> bool:
    """Whether a drafter (or one it combines) proposes at random."""
    return any(isinstance(d, Random) for d in getattr(drafter, "drafters", (drafter,)))


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


@dataclass
class Hints:
    """The last forward's predictions, offered to the windows a redrafting loop drafts anew.

    `tokens [B, J, K]`: what the last forward predicted at each slot's position (-1 =
    none); `fed [B, J, K]`: the draft it was fed there; `chain_start [J]`: a window's
    first slot. A window is *in step* while the drafter re-proposes the drafts the last
    forward saw: there the prediction was made on the same words, up to the ones changed
    since, and it replaces the drafter's proposal. A caption that repeats its example with
    other colours thus takes the example's words from lookup and the model's colours from
    the hints (lookup's phrase runs on across a hinted word). Once the drafter proposes
    something else (a word was inserted and the text shifted), the window is out of step
    to its end.
    """

    tokens: torch.Tensor
    fed: torch.Tensor
    chain_start: torch.Tensor


def first_drafts(
    drafter,
    history: torch.Tensor,  # [B, T, K] long: committed tokens and current drafts, -1 where none
    positions: torch.Tensor,  # [B, J] long: positions to draft, -1 = skip
    layout: TokenLayout,
    prompt: torch.Tensor | None,
    u: torch.Tensor,  # float64 [B, J, K], the uniforms a random proposal inverts, or long [B, J, K] keyed drafts
    hints: Hints | None = None,
) -> torch.Tensor:
    """Drafts `[B, J, K]` for `positions`, filled left to right so that a copy or a lookup
    can take the draft just placed (`history` is read, not written). -1 where skipped.
    With `hints`, a slot of a window in step takes its hint (see `Hints`)."""
    B, J = positions.shape
    K = history.shape[-1]
    out = torch.full((B, J, K), -1, dtype=torch.long, device=history.device)
    live = positions >= 0
    sources = getattr(drafter, "sources", lambda *_: None)(layout, positions.clamp(min=0)) if hints is None else None
    if sources is not None:
        return drafts_in_waves(drafter, sources, history, positions, layout, prompt, u)
    rows = torch.arange(B, device=history.device)
    ctx = DraftContext(layout, history, prompt, run=torch.full((B,), -1, dtype=torch.long, device=history.device))
    history = ctx.history  # a view into ctx.text
    in_step = torch.ones(B, dtype=torch.bool, device=history.device)
    any_live = live.any(0).tolist()
    all_live = live.all(0).tolist()
    breaks = torch.cat([torch.zeros_like(positions[:, :1], dtype=torch.bool), positions[:, 1:] != positions[:, :-1] + 1], 1)
    starts = [False] * J if hints is None else hints.chain_start.tolist()
    safe_positions = positions.clamp(min=0)
    for j in range(J):
        ctx.run.masked_fill_(breaks[:, j], -1)  # a lookup phrase runs on only into the next position
        if starts[j]:
            in_step.fill_(True)
        if not any_live[j]:
            continue
        safe = safe_positions[:, j]
        allowed = layout.allowed_at(safe)
        if allowed is not None and K == 1:
            allowed = allowed[:, None]
        draft = keep_allowed(drafter.propose(ctx, safe, u[:, j], allowed), allowed)
        if hints is not None:
            hint = keep_allowed(hints.tokens[:, j], allowed)
            in_step &= (draft == hints.fed[:, j]).all(-1)
            draft = torch.where((in_step & (hint >= 0).all(-1))[:, None], hint, draft)
        if all_live[j]:
            out[:, j] = draft
            history[rows, safe] = draft
        else:
            out[:, j] = torch.where(live[:, j, None], draft, -1)
            history[rows[live[:, j]], safe[live[:, j]]] = draft[live[:, j]]
    return out


def drafts_in_waves(drafter, sources: torch.Tensor, history: torch.Tensor, positions: torch.Tensor, layout: TokenLayout,
                    prompt: torch.Tensor | None, u: torch.Tensor) -> torch.Tensor:
    """`first_drafts` for a drafter that names the positions each proposal reads
    (`sources [B, J, C]`): each wave drafts, in one pass, every position whose sources are
    not waiting for a draft of this call, and writes its drafts into the history. The
    tokens are those of filling position by position; copies along a row of a grid take
    two waves instead of one pass per position."""
    B, J = positions.shape
    safe = positions.clamp(min=0)
    allowed = layout.allowed_at(safe)
    allowed = allowed[:, :, None] if allowed is not None and history.shape[-1] == 1 else allowed
    reads = (sources[..., None] == positions[:, None, None, :]).any(2)  # [B, J, J]: proposal j reads position i
    out = torch.full((B, J, history.shape[-1]), -1, dtype=torch.long, device=history.device)
    pending = positions >= 0
    history = history.clone()
    rows = torch.arange(B, device=history.device)[:, None].expand(B, J)
    for _ in range(J):  # sources come before their position in the layout: at most J waves
        if not bool(pending.any()):
            break
        wave = pending & ~(reads & pending[:, None, :]).any(-1)
        draft = keep_allowed(drafter.propose(DraftContext(layout, history, prompt), safe, u, allowed), allowed)
        out = torch.where(wave[..., None], draft, out)
        history[rows[wave], safe[wave]] = draft[wave]
        pending &= ~wave
    return out
