"""decoding="auto": before each forward, the keyed setting with the most tokens per second.

Wall-time speed-up <= tokens per forward x cost(1 input) / cost(inputs per forward). The
first factor belongs to the decode (how well drafts fit), the second to the hardware. auto
keeps an estimate of each and, before every forward, picks

    argmax over (w, setting) of  (E[run length | window w] + gain(setting)) / (cost(rows, 1 + w + nodes(setting)) + glue)

over windows w (w = 0 is an AR step: one input, one token, at AR's own loop time), branch
settings (none, or the device profile's presets where the session has tree attention:
`mmspec.core.device`), the first-draft
drafter (copies along the layout's axes, or random) and, when the call has a learned draft
head, whether it drafts the first slot (its seconds per forward measured on the call and
added to the glue). The head's worth is measured paired: on the forwards it drafts, how
often its first draft and the carried one it replaced would each have been the committed
token (`FrontHits`); a window's tokens beyond the first scale by their ratio. `cost` is the device's measured curve
(`mmspec.decoding.auto.cost_curve`), plus the seconds this call's forwards take beyond it;
`glue` the loop's own seconds per iteration, measured on this call. E and gain come from the decode itself:

* `AcceptanceModel`: E[run length | w] = 1 + a f(w), f a log-shaped return of a longer
  window, with one scale a learnt from every forward of the decode (decaying sums from an
  optimistic prior, so that an untried longer window gets tried once it could pay);
  `RunAcceptance` for loops that redraft every window (prompt-lookup): one per-slot rate;
* branch gains: the tokens a branch setting added beyond the window's own run;
* drafter hits: how often each drafter it may choose would have proposed the token that was
  committed (for a one-hot draft, the chance that it is accepted when fresh).

Exactness: auto verifies by keyed noise (`mmspec.kernels.verify_keyed`): a position's token
is its Gumbel winner under the row's key, whatever window, drafts and branches reached it.
So the choices, even those that follow the loop's measured seconds, change how many
forwards a decode takes, never its tokens: they are AR's for the seed (tested by token
equality with a chooser that changes its mind every forward, and on the measured curve).
With a relaxed rule or an inexact schedule the tokens would follow the choices, so there
auto's choices are fixed (`DecodingConfig.chooses`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mmspec.decoding.auto.acceptance import AcceptanceModel, DrafterHits, RunAcceptance
from mmspec.decoding.auto.cost_curve import CostCurve
from mmspec.decoding.branches.setting import BranchSetting, branch_nodes
from mmspec.decoding.drafts import Copy, FirstOf, Lookup, Random

WINDOWS = (0, 2, 4, 8, 16, 32)  # few enough that each is tried within one image
# axes along which a copy is a plausible first draft; not the innermost ("col", "token"):
# copies there chain a draft's own error along the window
COPY_AXES = ("row", "frame", "step", "face")


@dataclass(frozen=True)
class Choice:
    """One forward's setting: drafts fed per window (0: an AR step), branches, first drafts."""

    window: int
    branches: BranchSetting | None = None
    drafter: object = None
    head: bool = False  # the learned draft head drafts the slots after the front


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
    prompt: torch.Tensor | None = None  # [B, P, K] long: the prompt's tokens, where drafters may read them
    head: bool = False  # the call has a learned draft head to choose


def drafter_options(layout, has_prompt: bool) -> tuple:
    """Text (one token a step and prompt tokens): n-gram lookup in the prompt and the
    history (prompt-lookup decoding's strength, which hit counts of copies cannot rank);
    else copies along each of the layout's axes that carry content, then random."""
    if has_prompt and layout.axes == ("step",) and layout.tokens_per_step == 1:
        return (FirstOf((Lookup(), Random())),)
    axes = ("frame",) + COPY_AXES if layout.prompt_frames else COPY_AXES  # the prompt's frame: known from the start
    copies = tuple(FirstOf((Copy(axis), Random())) for axis in dict.fromkeys(axes) if axis in layout.axes)
    return copies + (Random(),)


class FrontHits:
    """The head's first drafts' hits over the carried drafts' on the same forwards, as decaying
    sums from a prior ratio `prior` worth `weight` hits: optimistic, so that the head is tried."""

    def __init__(self, prior: float = 1.5, weight: float = 4.0, decay: float = 0.98):
        self.head, self.carried = prior * weight, weight
        self.decay = decay

    def observe(self, head_hits: float, carried_hits: float) -> None:
        self.head = self.head * self.decay + head_hits
        self.carried = self.carried * self.decay + carried_hits

    def ratio(self) -> float:
        return self.head / max(self.carried, 1e-6)


# AR steps must win by this much: they drop the windows' drafts, which later forwards would
# have found refined (worth more than the one forward at hand shows)
AR_STEP_MARGIN = 1.15


class CostChooser:
    """auto's choice: the setting with the most expected tokens per second, from the
    cost curve and what this decode has accepted so far. A chooser offers `choose`,
    `observe` and `observe_commits`, and is asked every `every` forwards."""

    every = 4  # a choice reads its statistics off the device: not at every forward
    # a Jacobi forward chosen without the head ends it for the call: its measured worth does not
    # change while it is off, so it would not come back, and feeding it costs even then
    drops_head = True

    def __init__(self, context: AutoContext, layout, device):
        self.context = context
        self.acceptance = RunAcceptance() if context.redraft else AcceptanceModel()
        self.front_hits = FrontHits() if context.head else None
        self.glue_s = self.ar_glue_s = 0.0  # the loop's own seconds per iteration, this call's
        self.head_s = 0.0  # the head's seconds per forward it drafts for, this call's
        self.draft_s = 0.0  # a redrafting loop's seconds per slot drafted, this call's
        self.scale, self.excess_s = 1.0, 0.0  # this call's forwards: curve(n) * scale + excess_s seconds
        self.ar_steps = False  # whether window 0 runs as a plain AR step (set by the loop)
        fixed = len(context.drafters) == 1
        self.hits = None if fixed else DrafterHits(context.drafters, layout, device, prompt=context.prompt)
        self.drafter = context.drafters[0]

    def choose(self, windows_per_row: float) -> Choice:
        """`windows_per_row`: live windows per row of the curve's batch (below 1 when
        finished sequences have left the forwards)."""
        best, best_rate = None, -1.0
        for setting in self.context.branch_settings:
            nodes = 0 if setting is None else self.context.nodes[setting]
            for w in self.context.windows:
                if setting is not None and w < setting.slots:
                    continue  # branches grow from fed window slots
                inputs = windows_per_row * (1 + w + nodes)
                if w == 0 and setting is None and self.ar_steps:  # one token, at AR's own cost
                    rate = 1.0 / max(self.forward_s(windows_per_row) + self.ar_glue_s, 1e-12) / AR_STEP_MARGIN
                    if rate > best_rate:
                        best, best_rate = Choice(w, setting, self.drafter), rate
                    continue
                # a redrafting loop drafts the whole window every forward (draft_s is 0 otherwise:
                # drafting the few slots a slide empties counts in glue_s)
                glue = self.glue_s + self.draft_s * windows_per_row * w
                plain = self.acceptance.expected(w, setting)
                for head in (False, True) if self.front_hits is not None and w and setting is None else (False,):
                    expected = 1 + (plain - 1) * self.front_hits.ratio() if head else plain
                    rate = expected / max(self.forward_s(inputs) + glue + head * self.head_s, 1e-12)
                    if rate > best_rate:
                        best, best_rate = Choice(w, setting, self.drafter, head), rate
        return best

    def forward_s(self, inputs: float) -> float:
        """A forward's expected seconds at `inputs` per row: the curve's, scaled down where this
        call's forwards are faster, plus what they took beyond it where slower."""
        return self.context.cost(inputs) * self.scale + self.excess_s

    def observe(self, choice: Choice, run_tokens: float, by_branches: float, forwards: float, glue_s: float,
                ar_glue_s: float = 0.0, scale: float = 1.0, excess_s: float = 0.0, draft_s: float = 0.0,
                rejections: float = 0.0, head_s: float = 0.0) -> None:
        """The forwards since the last choice: the tokens of their windows' runs per window, in
        all (`by_branches` of them past the windows' own runs; nothing after AR steps), windows that ended at a
        rejected draft (per window, in all), the loop's own time per Jacobi forward and per
        AR step (a redrafting loop's drafting apart), that drafting's seconds per slot, and
        how the forwards' seconds relate to the curve's (`GlueTimer.fit`), and the head's
        seconds per forward it drafted for (`head_s`)."""
        self.glue_s, self.ar_glue_s, self.draft_s = glue_s, ar_glue_s, draft_s
        self.scale, self.excess_s = scale, excess_s
        self.head_s = head_s or self.head_s
        if choice.window == 0 and self.ar_steps:
            self.acceptance.forget(forwards)  # AR steps show nothing of the drafts: the prior comes back
        elif forwards:
            if choice.head:  # what the same forwards would have committed with the carried drafts
                run_tokens = forwards + (run_tokens - forwards) / self.front_hits.ratio()
            self.acceptance.observe(choice.window, choice.branches, run_tokens, by_branches, forwards, rejections)

    def observe_front(self, head_hits: float, carried_hits: float) -> None:
        """The forwards since the last choice: how many first drafts of the head, and of the
        carried drafts it replaced, were the committed token."""
        self.front_hits.observe(head_hits, carried_hits)

    def observe_commits(self, tokens: torch.Tensor, new: torch.Tensor, committed: torch.Tensor,
                        at_random: torch.Tensor | None = None) -> None:
        """Every few forwards: the positions committed since, for the drafters' hit rates
        (`at_random`: what a random first draft would have been at them, where known)."""
        if self.hits is not None:
            self.hits.observe(tokens, new, committed, at_random)
            self.drafter = self.hits.best()


def make_chooser(config, layout, cost: CostCurve, branch_settings: tuple, max_window: int, device,
                 prompt: torch.Tensor | None = None, head: bool = False):
    """auto's chooser for one call: the config's fixed parts, the rest open, the layout's
    drafter options, and `config.chooser` in place of `CostChooser` when given."""
    windows = (0, config.window) if config.window is not None else tuple(w for w in WINDOWS if w <= max_window)
    drafters = (config.drafter,) if config.init is not None else drafter_options(layout, prompt is not None)
    nodes = {setting: branch_nodes(setting, max(windows), layout) for setting in branch_settings if setting is not None}
    context = AutoContext(windows, branch_settings, drafters, cost, layout, nodes, config.redraft, prompt, head)
    return (config.chooser or CostChooser)(context, layout, device)
