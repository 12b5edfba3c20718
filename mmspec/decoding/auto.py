"""decoding="auto": before each forward, the exact setting with the most tokens per second.

Wall-time speed-up <= tokens per forward x cost(1 input) / cost(inputs per forward). The
first factor belongs to the decode (how well drafts fit), the second to the hardware. auto
keeps an estimate of each and, before every forward, picks

    argmax over (w, b) of  (E[committed | window w] + gain(b)) / (cost(rows, 1 + w + nodes(b)) + glue)

over windows w (w = 0 is an AR step: one input, one token, at AR's own loop time), branch
settings b (none, or a few sizes where the session has tree attention), and the first-draft
drafter (copies along the layout's axes, or random). `cost` is the device's measured curve
(`mmspec.decoding.cost_model`), plus the seconds this call's forwards take beyond it;
`glue` the loop's own seconds per iteration, measured on this call. E and gain come from the decode itself:

* `AcceptanceModel`: E[committed | w] = 1 + a f(w), f a log-shaped return of a longer
  window, with one scale a learnt from every forward of the decode (decaying sums from an
  optimistic prior, so that an untried longer window gets tried once it could pay);
  `RunAcceptance` for loops that redraft every window (prompt-lookup): one per-slot rate;
* branch gains: the tokens a branch setting added beyond the window's own run;
* drafter hits: how often each candidate drafter would have proposed the token that was
  committed (for a one-hot draft, the chance that it is accepted when fresh).

Exactness: every choice is a function of what was decoded before the forward (committed
tokens, past acceptance, the cost curve), never of the uniforms the forward will use. Given
the past, the forward is an ordinary MC-SJD forward with some window and drafts, which
samples the model's distribution; so the whole decode does (tested by chi-square with a
chooser that changes its mind every forward). A seed gives the same tokens where the
choices ignore time (`cost="off"`, or every part fixed); with a measured curve a choice can
flip with the loop's timings, and each sample is still the model's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import math

import torch

from mmspec.decoding.branches import BranchSetting, branch_nodes
from mmspec.decoding.cost_model import CostCurve
from mmspec.decoding.drafts import Copy, FirstOf, Lookup, Random

WINDOWS = (0, 2, 4, 8, 16, 32)  # few enough that each is tried within one image
BRANCH_PRESETS = ((4, 4, 2), (8, 12, 3))  # (candidates m, slots D, length c): docs/decoding-methods.md's rows
# axes along which a copy is a plausible first draft; not the innermost ("col", "token"):
# copies there chain a draft's own error along the window
COPY_AXES = ("row", "frame", "step", "face")


@dataclass(frozen=True)
class Choice:
    """One forward's setting: drafts fed per window (0: an AR step), branches, first drafts."""

    window: int
    branches: BranchSetting | None = None
    drafter: object = None


@dataclass
class AutoContext:
    """What a chooser may know before the decode: the options, the cost curve, the layout."""

    windows: tuple[int, ...]
    branch_settings: tuple[BranchSetting | None, ...]
    drafters: tuple
    cost: CostCurve
    layout: object
    nodes: dict = field(default_factory=dict)  # BranchSetting -> branch inputs per window, at most
    redraft: bool = False  # every forward drafts its windows afresh


class AcceptanceModel:
    """Tokens a window commits per forward: E[committed | window w] = 1 + a f(w), with
    f(w) = log2(1 + w) / log2(17) the diminishing return of a longer window (Jacobi
    drafts far from the committed front rarely survive), and the scale a (what window 16
    adds) learned from every forward of the decode, whatever its window, as decaying sums
    starting from a prior `scale` worth `weight` forwards of window 16.

    One shared scale instead of a mean per window: a single image takes about a hundred
    forwards, too few to try each window long enough, and a window's forwards are
    measured as decoded with it (a longer window pays later too: its tail drafts get their
    p, and are better when they reach the front). Branches add a mean gain of their own,
    the tokens they committed beyond their window's run, from an optimistic prior."""

    def __init__(self, scale: float = 1.5, weight: float = 2.0, decay: float = 0.98, branch_prior: float = 1.0):
        self.scale, self.weight, self.decay, self.branch_prior = scale, weight, decay, branch_prior
        self.gained, self.reach = 0.0, 0.0  # sum of (committed - 1), sum of f(w)
        self.branch_sums: dict = {}

    @staticmethod
    def shape(window: int) -> float:
        return math.log2(1 + window) / math.log2(17)

    def observe(self, window: int, branches, committed: float, by_branches: float, forwards: float,
                rejections: float = 0.0) -> None:
        """`forwards` forwards at `window` committed `committed` tokens per window in all,
        `by_branches` of them past the windows' own runs (`rejections`: see `RunAcceptance`)."""
        d = self.decay ** forwards
        self.gained = self.gained * d + committed - by_branches - forwards
        self.reach = self.reach * d + self.shape(window) * forwards
        if branches is not None:
            total = self.branch_sums.setdefault(branches, [0.0, 0.0])
            total[0], total[1] = total[0] * d + by_branches, total[1] * d + forwards

    def forget(self, forwards: float) -> None:
        """Forwards that measured nothing (AR steps): what was learnt fades towards the prior,
        so that after a stretch of AR steps a window is tried again."""
        self.observe(0, None, forwards, 0.0, forwards)  # one token a forward, f(0) = 0: decay alone

    def expected(self, window: int, branches=None) -> float:
        """E[tokens a window commits per forward] with this setting."""
        scale = (self.gained + self.scale * self.weight) / (self.reach + self.weight)
        gain = 0.0
        if branches is not None:
            total = self.branch_sums.get(branches, [0.0, 0.0])
            gain = (total[0] + self.branch_prior) / (total[1] + 1.0)
        return 1.0 + max(scale, 0.0) * self.shape(window) + gain


class RunAcceptance:
    """Tokens a redrafting window commits per forward. Redrafted drafts are fresh at every
    forward (a phrase looked up again, not a Jacobi draft refined in place), so a window's
    slot is accepted, given the slot before it was, with one rate alpha whatever its
    distance from the front: E[committed | window w] = 1 + alpha + ... + alpha^w. alpha is
    learnt as accepted drafts over drafts tried (accepted ones and the first rejected one
    of each window), in decaying sums from an optimistic prior. Phrase runs are long where
    they fit: log-shaped Jacobi acceptance would undervalue windows of 8 to 16 there."""

    def __init__(self, alpha: float = 0.75, weight: float = 4.0, decay: float = 0.98):
        self.alpha, self.weight, self.decay = alpha, weight, decay
        self.accepted, self.tried = 0.0, 0.0

    def observe(self, window: int, branches, committed: float, by_branches: float, forwards: float,
                rejections: float = 0.0) -> None:
        """`forwards` forwards committed `committed` tokens per window in all (each its
        accepted drafts and one token drawn), `rejections` of their windows ending at a
        rejected draft."""
        d = self.decay ** forwards
        accepted = committed - by_branches - forwards
        self.accepted = self.accepted * d + accepted
        self.tried = self.tried * d + accepted + rejections

    def forget(self, forwards: float) -> None:
        """AR steps: what was learnt fades towards the prior."""
        d = self.decay ** forwards
        self.accepted, self.tried = self.accepted * d, self.tried * d

    def expected(self, window: int, branches=None) -> float:
        alpha = (self.accepted + self.alpha * self.weight) / (self.tried + self.weight)
        return sum(alpha ** j for j in range(window + 1))


class DrafterHits:
    """For each candidate copy drafter, decaying counts of committed positions whose token
    equals the one it would copy (where its source was committed)."""

    def __init__(self, drafters: tuple, layout, device, decay: float = 0.99):
        self.drafters, self.decay = drafters, decay
        sources = []
        for drafter in drafters:
            axis = first_copy_axis(drafter)
            sources.append(None if axis is None else layout.neighbour(axis).to(device))
        self.sources = sources
        self.hits = [0.0] * len(drafters)
        self.seen = [0.0] * len(drafters)

    def observe(self, tokens: torch.Tensor, new: torch.Tensor, committed: torch.Tensor) -> None:
        """`tokens [B, T, K]`, positions committed by this forward `new [B, T]`, all committed."""
        for i, src in enumerate(self.sources):
            if src is None:
                continue
            ok = new & (src >= 0) & committed.gather(1, src.clamp(min=0).expand_as(new))
            same = (tokens == tokens[:, src.clamp(min=0)]).all(-1) & ok
            seen, hit = torch.stack([ok.sum(), same.sum()]).tolist()
            self.seen[i] = self.seen[i] * self.decay + seen
            self.hits[i] = self.hits[i] * self.decay + hit

    def best(self):
        """The drafter with the highest hit rate (random, where no copy has hit)."""
        rates = [h / s if s else 0.0 for h, s in zip(self.hits, self.seen)]
        return self.drafters[max(range(len(rates)), key=lambda k: (rates[k], -k))]  # ties: the first, a copy


def first_copy_axis(drafter) -> str | None:
    if isinstance(drafter, Copy):
        return drafter.axis
    if isinstance(drafter, FirstOf) and isinstance(drafter.drafters[0], Copy):
        return drafter.drafters[0].axis
    return None


def candidate_drafters(layout, has_prompt: bool) -> tuple:
    """Text (one token a step and prompt tokens): n-gram lookup in the prompt and the
    history (prompt-lookup decoding's strength, which hit counts of copies cannot rank);
    else copies along each of the layout's axes that carry content, then random."""
    if has_prompt and layout.axes == ("step",) and layout.tokens_per_step == 1:
        return (FirstOf((Lookup(), Random())),)
    copies = tuple(FirstOf((Copy(axis), Random())) for axis in COPY_AXES if axis in layout.axes)
    return copies + (Random(),)


# AR steps must win by this much: they drop the windows' drafts, which later forwards would
# have found refined (worth more than the one forward at hand shows)
AR_STEP_MARGIN = 1.15


class CostChooser:
    """auto's choice: the setting with the most expected tokens per second, from the
    cost curve and what this decode has accepted so far. A chooser offers `choose`,
    `observe` and `observe_commits`, and is asked every `every` forwards."""

    every = 4  # a choice reads its statistics off the device: not at every forward

    def __init__(self, context: AutoContext, layout, device):
        self.context = context
        self.acceptance = RunAcceptance() if context.redraft else AcceptanceModel()
        self.glue_s = self.ar_glue_s = 0.0  # the loop's own seconds per iteration, this call's
        self.draft_s = 0.0  # a redrafting loop's seconds per slot drafted, this call's
        self.scale, self.excess_s = 1.0, 0.0  # this call's forwards: curve(n) * scale + excess_s seconds
        self.ar_steps = False  # whether window 0 runs as a plain AR step (set by the loop)
        fixed = len(context.drafters) == 1
        self.hits = None if fixed else DrafterHits(context.drafters, layout, device)
        self.drafter = context.drafters[0]

    def choose(self, windows_per_row: float) -> Choice:
        """`windows_per_row`: live windows per row of the curve's batch (below 1 when
        finished sequences have left the forwards)."""
        best, best_rate = None, -1.0
        for b in self.context.branch_settings:
            nodes = 0 if b is None else self.context.nodes[b]
            for w in self.context.windows:
                if b is not None and w < b.slots:
                    continue  # branches grow from fed window slots
                inputs = windows_per_row * (1 + w + nodes)
                if w == 0 and b is None and self.ar_steps:  # one token, at AR's own cost
                    rate = 1.0 / max(self.forward_s(windows_per_row) + self.ar_glue_s, 1e-12) / AR_STEP_MARGIN
                else:
                    # a redrafting loop drafts the whole window every forward (draft_s is 0 otherwise:
                    # drafting the few slots a slide empties counts in glue_s)
                    glue = self.glue_s + self.draft_s * windows_per_row * w
                    rate = self.acceptance.expected(w, b) / max(self.forward_s(inputs) + glue, 1e-12)
                if rate > best_rate:
                    best, best_rate = Choice(w, b, self.drafter), rate
        return best

    def forward_s(self, inputs: float) -> float:
        """A forward's expected seconds at `inputs` per row: the curve's, scaled down where this
        call's forwards are faster, plus what they took beyond it where slower."""
        return self.context.cost(inputs) * self.scale + self.excess_s

    def observe(self, choice: Choice, committed: float, by_branches: float, forwards: float, glue_s: float,
                ar_glue_s: float = 0.0, scale: float = 1.0, excess_s: float = 0.0, draft_s: float = 0.0,
                rejections: float = 0.0) -> None:
        """The forwards since the last choice: tokens committed per window in all (by
        branches past the windows' runs; nothing after AR steps), windows that ended at a
        rejected draft (per window, in all), the loop's own time per Jacobi forward and per
        AR step (a redrafting loop's drafting apart), that drafting's seconds per slot, and
        how the forwards' seconds relate to the curve's (`GlueTimer.fit`)."""
        self.glue_s, self.ar_glue_s, self.draft_s = glue_s, ar_glue_s, draft_s
        self.scale, self.excess_s = scale, excess_s
        if choice.window == 0 and self.ar_steps:
            self.acceptance.forget(forwards)  # AR steps show nothing of the drafts: the prior comes back
        elif forwards:
            self.acceptance.observe(choice.window, choice.branches, committed, by_branches, forwards, rejections)

    def observe_commits(self, tokens: torch.Tensor, new: torch.Tensor, committed: torch.Tensor) -> None:
        """Every few forwards: the positions committed since, for the drafters' hit rates."""
        if self.hits is not None:
            self.hits.observe(tokens, new, committed)
            self.drafter = self.hits.best()


@dataclass
class ChoiceLog:
    """What auto chose over a call: forwards per window, per branch setting, per drafter."""

    windows: Counter = field(default_factory=Counter)
    branches: Counter = field(default_factory=Counter)
    drafters: Counter = field(default_factory=Counter)

    def add(self, choice: Choice) -> None:
        self.windows[choice.window] += 1
        self.branches["none" if choice.branches is None else str(choice.branches)] += 1
        self.drafters[getattr(choice.drafter, "name", "random")] += 1

    def to_dict(self) -> dict:
        return {"windows": dict(sorted(self.windows.items())), "branches": dict(self.branches),
                "drafters": dict(self.drafters)}



def merge_choices(choices: list[dict]) -> dict:
    """The `DecodeStats.choices` of several calls, added up."""
    total = {"windows": Counter(), "branches": Counter(), "drafters": Counter()}
    for c in choices:
        for part, counts in c.items():
            total[part].update(counts)
    return {part: dict(sorted(counts.items())) for part, counts in total.items()}


def describe_choices(choices: dict) -> str:
    """One line, shares of the choices: "window 16 (70%), 8 (25%), 0 (5%); branches none (100%);
    first drafts above (100%)" (window 0: an AR step)."""
    def shares(counts: dict, top: int) -> str:
        total = sum(counts.values()) or 1
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        return ", ".join(f"{k} ({100 * v / total:.0f}%)" for k, v in ranked)

    return (f"window {shares(choices['windows'], 4)}; branches {shares(choices['branches'], 3)}; "
            f"first drafts {shares(choices['drafters'], 2)}")


def make_chooser(config, layout, cost: CostCurve, branch_settings: tuple, max_window: int, device, has_prompt: bool = False):
    """auto's chooser for one call: the config's fixed parts, the rest open, the layout's
    candidate drafters, and `config.chooser` in place of `CostChooser` when given."""
    windows = (0, config.window) if config.window is not None else tuple(w for w in WINDOWS if w <= max_window)
    drafters = (config.drafter,) if config.init is not None else candidate_drafters(layout, has_prompt)
    nodes = {b: branch_nodes(b, max(windows), layout) for b in branch_settings if b is not None}
    context = AutoContext(windows, branch_settings, drafters, cost, layout, nodes, config.redraft)
    return (config.chooser or CostChooser)(context, layout, device)
