"""Which method decodes, parsed from names such as "zipar+mc-sjd+gsd" or "lpd-20".

Names follow one grammar (`mmspec.decoding.names`); `parse_decoding` turns a name into the
config it says: a `DecodingConfig` (Jacobi decoding and AR, for any `TokenModel`) or an
`LPDDecoding` (LPD's group-by-group decoding, for an LPD model). `generate` takes either.

A `DecodingConfig` is four independent choices:
  * drafting: "ar" (none), "sjd" (fresh drafts each iteration), "mc-sjd" (coupled drafts),
    "keyed" (Jacobi iteration under position-keyed noise: AR's tokens for the seed,
    `mmspec.kernels.verify_keyed`) or "auto" (keyed, its window, branches and first drafts
    picked forward by forward from the device's measured cost curve and the decode's own
    acceptance: `mmspec.decoding.auto`);
  * acceptance: exact (default), "lantern", "gsd" or "pcg" (relaxed; need sjd or mc-sjd);
  * schedule: raster order (default), "zipar" (rows decoded side by side) or a schedule
    object (`mmspec.decoding.schedules`: `Frames` for video);
  * first drafts: a drafter (`mmspec.decoding.drafts`) by name ("random", "above",
    "lookup+above", ...) or as an object.
An `LPDDecoding` is the number of forwards (LPD's group sizes) and the order's repulsion.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field

from mmspec.core.rules import ExactRule, GSDRule, LanternRule, PCGRule
from mmspec.decoding.branches.setting import BranchSetting
from mmspec.decoding.drafts import drafter_from_name
from mmspec.decoding.names import DECODINGS, DRAFTING, FAMILY_DRAFTERS, LPD_NAMES, RELAXED, parse_name  # noqa: F401 (re-exported)
from mmspec.decoding.schedules import Frames, Raster, ZipAR, check_count

COST_MODES = ("cached", "refresh", "off")
AUTO_MAX_WINDOW = 32  # auto's largest window unless one is given


@dataclass(frozen=True)
class DecodingConfig:
    """A decoding method and its parameters.

    Args:
        method (`str`, defaults to "mc-sjd"): "ar", "sjd", "mc-sjd", "keyed" (Jacobi under
            keyed noise: the same tokens as "ar" for the same seed, whatever the window,
            drafts and branches) or "auto" (keyed, hardware-aware: `window`, `branches` and
            `init` left unset are chosen before each forward, AR among the choices;
            `mmspec.decoding.auto`). With a relaxed rule or an inexact schedule, auto's
            choices are fixed (window 16, its first drafter, no branches) and it verifies as
            MC-SJD (relaxed) or keyed (schedule), so that a seed still gives one output.
        rule: `ExactRule()` (lossless), `LanternRule(k, delta | lam)` or `GSDRule(...)`.
        window (`int`, *optional*, defaults to 16; auto: chosen, up to 32): Jacobi draft
            window L (drafts per forward and open row). Given with auto, it is fixed (auto
            then chooses between it and AR steps).
        init (`str` or a drafter, *optional*, defaults to "random"; auto: chosen among the
            layout's copy drafters and random): first drafts of a slot: uniform over
            the allowed tokens, a copy of the token to the "left" or "above", "lookup" (n-gram
            lookup in the prompt and the history), several joined by "+" (the first that
            proposes wins; random fills the rest), or a drafter object.
        zipar_window (`int`, *optional*): ZipAR: open row r+1 once row r has this many
            committed tokens; `None` decodes in raster order.
        schedule (*optional*): a schedule object (`Frames(rows=2)`, `ZipAR(4, axis=...)`)
            instead of `zipar_window`.
        redraft (`bool`, defaults to False): every forward drafts all slots afresh with the
            drafter, unfilled (a window ends at its first slot without a proposal); the
            last forward's predictions replace the drafter's words only while the window
            follows the drafts that forward saw (`mmspec.decoding.drafts.Hints`). Prompt-
            lookup decoding ("prompt-lookup": SJD, "phrase-lookup" drafts), for text that
            repeats its prompt with some words changed.
        branches (`int`, *optional*, defaults to 0; auto: chosen when the session has tree
            attention): candidate tokens fed beside the draft of each of the
            first `branch_slots` window slots (per codebook for steps of K tokens: the draft
            step with one token swapped), under tree attention, each followed by
            `branch_length` of the window's next drafts; when a draft is rejected and the
            token drawn instead is a candidate, its branch goes on verifying in the same
            forward (`mmspec.decoding.branches`; exact). Each branch keeps its own next
            drafts from forward to forward. Needs a session with tree attention.
        branch_slots (`int`, defaults to 4): leading window slots that get candidates.
        branch_length (`int`, defaults to 2): drafts that follow each candidate.
        step_test (`str`, defaults to "per-token"): how the exact rule tests a step of K
            tokens (the codebooks of an audio frame): "per-token", accepted when each token
            passes its own test; "joint", as one token of V^K, accepted with
            min(1, p(x)/q(x)) over the whole step and redrawn from the step residual
            (`mmspec.kernels.verify_joint`); or groups of codebooks tested together ("0+123").
            All are exact. A joint test accepts a given draft at least as often, but a
            rejection redraws the whole group, which moves later drafts' context more: on
            the shipped speech model it needs more forwards (docs/audio.md). Relaxed rules
            always test per token.
        cost (`str`, defaults to "cached"): auto's cost curve of the forward: "cached"
            (measured the first time a model, device, dtype, thread count and batch are seen,
            then read from the user's cache folder), "refresh" (measured again and
            rewritten) or "off" (no measurement: a flat curve, choosing by forwards alone).
        chooser (*optional*): auto's choice of settings, a callable `(AutoContext) -> chooser`
            (see `mmspec.decoding.auto.CostChooser`); for tests and studies.
        head (*optional*): a learned draft head (`mmspec.models.networks.draft_head.DraftHead`,
            bound to the model): it drafts the first `head_depth` slots after the commit
            front by a roll-out from the token just drawn (`mmspec.decoding.loop.head_drafts`);
            exact with every exact method. Used in raster order without branches or
            processors, on sessions that return hidden states; elsewhere ignored.
            None: a pipeline with a `drafter` component sets its own (unless its
            `use_drafter` is off); False: no head, whatever the pipeline has.
        head_depth (`int`, defaults to 1): the slots a head drafts (a roll-out: each slot after the
            first drafted where the slot before got a new draft).

    Example:
        >>> DecodingConfig.from_name("zipar+mc-sjd+gsd", window=8).name
        'zipar+mc-sjd+gsd'
    """

    method: str = "mc-sjd"
    rule: ExactRule | LanternRule | GSDRule | PCGRule = field(default_factory=ExactRule)
    window: int | None = None
    init: object = None
    zipar_window: int | None = None
    schedule: Raster | ZipAR | Frames | None = None
    redraft: bool = False
    branches: int | None = None
    branch_slots: int = 4
    branch_length: int = 2
    step_test: str = "per-token"
    cost: str = "cached"
    chooser: object = None
    head: object = None
    head_depth: int = 1

    def __post_init__(self):
        if self.method not in DRAFTING:
            raise ValueError(f"unknown drafting method {self.method!r}; choose from {', '.join(DRAFTING)}")
        if not self.chooses:  # what auto would choose is fixed at its plain default
            for name, default in (("window", 16), ("init", "random" if self.method != "auto" else None), ("branches", 0)):
                if getattr(self, name) is None:
                    object.__setattr__(self, name, default)
        if self.cost not in COST_MODES:
            raise ValueError(f"cost must be one of {', '.join(COST_MODES)}, got {self.cost!r}")
        if self.method == "ar" and not self.rule.exact:
            raise ValueError(f"{self.rule.name} is an acceptance rule for Jacobi drafts; use it with sjd or mc-sjd")
        if self.method != "ar" and self.window is not None:
            check_count("window", self.window)
        if self.redraft and self.method == "ar":
            raise ValueError("redraft drafts for Jacobi windows; use it with sjd or mc-sjd")
        if self.branches is not None and (isinstance(self.branches, bool) or not isinstance(self.branches, int) or self.branches < 0):
            raise ValueError(f"branches must be an integer >= 0 (0: none), got {self.branches!r}")
        if self.branches:
            if self.method == "ar" or self.redraft:
                raise ValueError("branches grow from the drafts of Jacobi windows; use them with sjd or mc-sjd, without redraft")
            check_count("branch_slots", self.branch_slots)
            if self.branch_length < 0:
                raise ValueError(f"branch_length must be >= 0, got {self.branch_length}")
        self.step_groups(None)  # a clear error for a bad step_test
        if self.method == "keyed" and not self.rule.exact:
            raise ValueError(f"keyed verification tests drafts for equality with AR's token; {self.rule.name} relaxes MC-SJD's "
                             f"test: use mc-sjd+{self.rule.name} (or auto+{self.rule.name})")
        if self.init is not None:
            if not isinstance(self.init, str) and not hasattr(self.init, "propose"):
                raise ValueError(f"init must be a drafter name (random, above, lookup, ...) or a drafter object, got {self.init!r}")
            self.drafter  # a clear error for an unknown name
        check_count("head_depth", self.head_depth)
        if self.zipar_window is not None:
            if self.schedule is not None:
                raise ValueError("give zipar_window or schedule, not both")
            check_count("zipar_window", self.zipar_window)

    def step_groups(self, K: int | None) -> tuple[tuple[int, ...], ...] | None:
        """The groups of a step's K codebooks that the exact rule tests together (None: token
        by token): `step_test` "per-token", "joint" (all K), or digits joined by "+", each
        run of digits one group ("0+123": codebook 0 alone, then 1 to 3 together)."""
        text = self.step_test
        if text == "per-token":
            return None
        if text == "joint":
            return None if K is None else (tuple(range(K)),)
        parts = text.split("+") if isinstance(text, str) else []
        groups = tuple(tuple(int(c) for c in part) for part in parts if part.isdigit())
        flat = sorted(k for g in groups for k in g)
        if not parts or len(groups) != len(parts) or flat != list(range(len(flat))) or (K is not None and len(flat) != K):
            raise ValueError(f"step_test must be per-token, joint, or every codebook 0..K-1 once in digit groups joined by + "
                             f"(e.g. 0+123), got {text!r}" + ("" if K is None else f" for K = {K}"))
        return groups

    @property
    def drafter(self):
        """The first-draft drafter object (`init` by name, or as given; None: auto chooses)."""
        if self.init is None:
            return None
        return drafter_from_name(self.init, fill=not self.redraft) if isinstance(self.init, str) else self.init

    @property
    def scheduler(self) -> Raster | ZipAR | Frames:
        """The schedule object: `schedule`, ZipAR at `zipar_window`, or raster order."""
        if self.schedule is not None:
            return self.schedule
        return ZipAR(self.zipar_window) if self.zipar_window is not None else Raster()

    @property
    def name(self) -> str:
        if self.redraft and self.rule.exact and isinstance(self.scheduler, Raster):
            return "prompt-lookup"
        schedule = self.scheduler.name
        parts = [] if schedule == "raster" else [schedule]
        if not (parts and self.method == "ar"):
            parts.append(self.method)
        if not self.rule.exact:
            parts.append(self.rule.name)
        return "+".join(parts)

    def describe(self) -> str:
        """The name plus every parameter that differs from its default, for tables."""
        params = [self.method] if self.name == "prompt-lookup" and self.method != "sjd" else []  # keyed prompt-lookup
        plain = self.method != "auto"
        if self.method != "ar" and self.window is not None and (self.window != 16 or not plain):
            params.append(f"window={self.window}")
        if self.method != "ar" and self.init is not None and (self.drafter.name != "random" or not plain):
            params.append(f"init={self.drafter.name}")
        if self.branches or (not plain and self.branches == 0):
            params.append("no branches" if not self.branches else f"branches={self.branches}x{self.branch_slots} slots, length {self.branch_length}")
        if self.step_test != "per-token" and self.rule.exact:
            params.append(f"{self.step_test} test")
        if self.head not in (None, False) and self.method != "ar":
            params.append(f"learned drafts, depth {self.head_depth}")
        elif self.head is False and self.method != "ar":
            params.append("no learned drafts")
        if self.zipar_window not in (None, 8):
            params.append(f"zipar_window={self.zipar_window}")
        if isinstance(self.schedule, (ZipAR, Frames)):
            params.append(repr(self.schedule))
        defaults = {"lantern": LanternRule(), "gsd": GSDRule(), "pcg": PCGRule()}.get(self.rule.name)
        if defaults is not None:
            for f in ("k", "delta", "lam", "rank_window", "prob_gap", "embed_dist", "groups"):
                if hasattr(self.rule, f) and getattr(self.rule, f) != getattr(defaults, f):
                    params.append(f"{f}={getattr(self.rule, f)}")
        return self.name + (f" ({', '.join(params)})" if params else "")

    @property
    def exact(self) -> bool:
        """Whether the output distribution is the model's (ZipAR and frame schedules drop
        context, so never)."""
        return self.rule.exact and self.scheduler.exact

    @property
    def draft_window(self) -> int:
        """Drafts per window (auto: the most it may choose): 0 for plain AR rows."""
        if self.method == "ar":
            return 0
        return AUTO_MAX_WINDOW if self.window is None else self.window

    @property
    def chooses(self) -> bool:
        """Whether auto's chooser picks the settings. Not with a relaxed rule or an inexact
        schedule: there the output would depend on the choices, so they are fixed."""
        return self.method == "auto" and self.rule.exact and self.scheduler.exact

    @property
    def keyed(self) -> bool:
        """Whether verification is keyed (AR, keyed, and auto with the exact rule): a
        position's token is its Gumbel winner, whatever the window and drafts."""
        return self.method in ("ar", "keyed", "auto") and self.rule.exact

    @property
    def branch_setting(self) -> BranchSetting | None:
        """The fixed branches, or None (none; under auto with `branches` unset: chosen)."""
        return BranchSetting(self.branches, self.branch_slots, self.branch_length) if self.branches else None

    @property
    def coupled(self) -> bool:
        """Whether next drafts are coupled with their p (MC-SJD, and auto with a relaxed rule)."""
        return self.method in ("mc-sjd", "auto")

    @classmethod
    def from_name(
        cls,
        name: str,
        *,
        window: int | None = None,
        init: str | None = None,
        zipar_window: int = 8,
        lantern_k: int = 1000,
        lantern_delta: float | None = 0.1,
        lantern_lambda: float | None = None,
        gsd_rank_window: int = 7,
        gsd_prob_gap: float = 0.15,
        gsd_embed_dist: float = 0.5,
        pcg_groups: int = 32,
        branches: int | None = None,
        branch_slots: int = 4,
        branch_length: int = 2,
        step_test: str = "per-token",
        cost: str = "cached",
        drafters: Mapping[str, object] | None = None,
    ) -> "DecodingConfig":
        """Parses "sjd", "mc-sjd+lantern", "zipar+mc-sjd", ... (the grammar:
        `mmspec.decoding.names`). `lantern_lambda` selects LANTERN++'s ratio form instead of
        `lantern_delta`.

        Drafter names may join in and replace `init`: "mc-sjd+lookup" is MC-SJD with
        lookup drafts; a drafter alone ("lookup") means SJD with it. "prompt-lookup" is
        prompt-lookup decoding: SJD redrafting every slot with "phrase-lookup".
        `drafters` supplies the drafter objects of a family's own drafter names
        (`names.FAMILY_DRAFTERS`: the mesh pipeline's "face-lookup"), each used alone.
        LPD's names ("lpd-20") are refused: `parse_decoding` or `LPDDecoding.from_name`
        parse those."""
        parsed = parse_name(name)
        if parsed.lpd:
            raise lpd_refusal(name)
        if parsed.redraft:
            return cls(method="sjd", window=window or 16, init="phrase-lookup", redraft=True)
        family = [d for d in parsed.drafters if d in FAMILY_DRAFTERS]
        if family:
            if family[0] not in (drafters or {}):
                raise ValueError(f"the {family[0]} drafter is for {FAMILY_DRAFTERS[family[0]]}, got {name!r}")
            if len(parsed.drafters) > 1:
                raise ValueError(f"{family[0]} drafts alone; join no other drafter to it, got {name!r}")
            init = drafters[family[0]]
        elif parsed.drafters:
            init = "+".join(parsed.drafters)
        rule = ExactRule()
        if parsed.rule == "lantern":
            rule = LanternRule(k=lantern_k, delta=None if lantern_lambda is not None else lantern_delta, lam=lantern_lambda)
        elif parsed.rule == "gsd":
            rule = GSDRule(rank_window=gsd_rank_window, prob_gap=gsd_prob_gap, embed_dist=gsd_embed_dist)
        elif parsed.rule == "pcg":
            rule = PCGRule(groups=pcg_groups)
        return cls(
            method=parsed.method,
            rule=rule,
            window=window,
            init=init,
            zipar_window=zipar_window if parsed.zipar else None,
            branches=branches,
            branch_slots=branch_slots,
            branch_length=branch_length,
            step_test=step_test,
            cost=cost,
        )


@dataclass(frozen=True)
class LPDDecoding:
    """LPD's group-by-group decoding of an LPD model (`mmspec.decoding.lpd`): "lpd-20",
    "lpd-32" (`steps` forwards, LPD's group sizes), or "ar" (one cell per forward, in the
    locality-aware order: the LPD model's own one-token-per-step baseline).
    `repulsion`: the order's, or None for the pipeline's (`generate`: 1).

    A type of its own rather than a `DecodingConfig` method: none of Jacobi's parameters
    (window, rule, drafts, schedule, branches) applies to it, and it needs another kind of
    model (one that decodes a group of cells per forward in an order it is given).
    """

    steps: int | None = 20  # None: one cell per step
    repulsion: int | None = None

    exact = True  # each group is drawn from the model's own distribution over it

    def __post_init__(self):
        r = self.repulsion
        if r is not None and (isinstance(r, bool) or not isinstance(r, numbers.Real) or not math.isfinite(r) or r < 0):
            raise ValueError(f"repulsion must be a finite number >= 0 (or None for the pipeline's), got {r!r}")

    @property
    def name(self) -> str:
        return "ar" if self.steps is None else "lpd"

    def describe(self) -> str:
        return "ar" if self.steps is None else f"lpd-{self.steps}"

    @classmethod
    def from_name(cls, name: str) -> "LPDDecoding":
        """"lpd-<steps>" or "ar" (the grammar: `mmspec.decoding.names`)."""
        return as_lpd_decoding(name)


def lpd_refusal(decoding) -> ValueError:
    """The one-line error for an LPD decoding given where a model decodes token by token."""
    name = decoding.describe() if isinstance(decoding, LPDDecoding) else decoding
    return ValueError(f"{name} is LPD's group-by-group decoding, for an LPD model (LPDPipeline); this one decodes token by "
                      f"token: choose from {', '.join(DECODINGS)}, optionally with drafters joined by '+', or prompt-lookup")


def as_lpd_decoding(decoding, who: str = "an LPD pipeline") -> LPDDecoding:
    """`decoding` (a name, a `DecodingConfig` or an `LPDDecoding`) as an `LPDDecoding`: the
    LPD names, and plain AR ("ar", exact) as one cell per forward; anything else is a one-line
    error naming what `who` takes."""
    config = parse_decoding(decoding)
    if isinstance(config, LPDDecoding):
        return config
    if config.name == "ar" and config.exact:
        return LPDDecoding(None)
    shown = decoding if isinstance(decoding, str) else config.describe()
    raise ValueError(f"{who} decodes group by group: choose lpd-<steps> ({', '.join(LPD_NAMES)}) or ar, got {shown!r}")


def parse_decoding(decoding, **params) -> DecodingConfig | LPDDecoding:
    """The config a decoding name says: an `LPDDecoding` for "lpd-<steps>", else
    `DecodingConfig.from_name(decoding, **params)` (`params` are Jacobi's and do not apply to
    LPD). A config is returned as given.

    Example:
        >>> parse_decoding("lpd-32"), parse_decoding("mc-sjd+gsd", window=8).describe()
        (LPDDecoding(steps=32, repulsion=None), 'mc-sjd+gsd (window=8)')
    """
    if isinstance(decoding, (DecodingConfig, LPDDecoding)):
        return decoding
    parsed = parse_name(decoding)
    if parsed.lpd:
        return LPDDecoding(parsed.steps)
    return DecodingConfig.from_name(decoding, **params)
