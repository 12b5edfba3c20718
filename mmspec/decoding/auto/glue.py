"""The loop's own seconds per iteration, and how this call's forwards relate to the cost
curve: what auto adds to the curve's price of a forward."""

from __future__ import annotations

import statistics
import time

from mmspec.core.device import DeviceProfile
from mmspec.decoding.auto.cost_curve import CostCurve


class GlueTimer:
    """What the curve cannot know, measured on this call's own iterations (the first of each
    kind, which warms up, left out; the latest `RECENT` of each count): the loop's seconds
    per iteration outside the forward (and outside timed drafting), for a Jacobi forward and
    for an AR step; the timed drafting's seconds per slot (a redrafting loop drafts its whole
    window every forward, so a longer window costs more than its forward); and how the
    forwards' seconds relate to the curve's (`fit`). Slower than the curve, the difference
    is added: it is mostly attention over the context decoded so far (the curve is measured
    on a fresh session), which a factor would lay on every further input as well.
    Faster than the curve (a curve measured under load from elsewhere), the curve is scaled
    down: subtracting a load's seconds would price the smallest forwards near zero. Nothing
    of it is kept across calls: a value measured under a burst of load would steer every
    later call, to AR steps alone say, which measure nothing that could correct it. Before a kind has a sample it counts as 0, so each call tries what the
    curve alone favours."""

    KINDS = ("glue_s", "ar_glue_s", "draft_s", "head_s")
    RECENT = 16

    def __init__(self, curve: CostCurve, profile: DeviceProfile):
        self.curve = curve
        self.on = curve.measured  # a flat curve chooses by forwards alone
        self.samples = {kind: [] for kind in self.KINDS}
        self.timed = []  # (forward's seconds, the curve's), the latest RECENT
        self.sync = profile.synchronize
        self.start = self.forward_start = self.forward_s = self.draft_start = 0.0
        self.drafting_s, self.drafted = 0.0, 0
        self.head_start = self.heading_s = 0.0
        self.inputs = 1
        self.warm = set()

    def begin_iteration(self) -> None:
        if self.on:
            self.sync()
            self.start = time.perf_counter()
            self.drafting_s, self.drafted = 0.0, 0
            self.heading_s = 0.0

    def begin_forward(self) -> None:
        if self.on:
            self.sync()
            self.forward_start = time.perf_counter()

    def end_forward(self, inputs_per_row: int) -> None:
        if self.on:
            self.sync()
            self.forward_s = time.perf_counter() - self.forward_start
            self.inputs = inputs_per_row

    def begin_draft(self) -> None:
        if self.on:
            self.sync()
            self.draft_start = time.perf_counter()

    def end_draft(self, slots: int) -> None:
        """`slots`: the window slots (per row) this drafting pass filled."""
        if self.on:
            self.sync()
            self.drafting_s += time.perf_counter() - self.draft_start
            self.drafted += slots

    def begin_head(self) -> None:
        if self.on:
            self.sync()
            self.head_start = time.perf_counter()

    def end_head(self) -> None:
        """The learned draft head's drafting, timed apart from the glue."""
        if self.on:
            self.sync()
            self.heading_s += time.perf_counter() - self.head_start

    def end_iteration(self, kind: str) -> None:
        if self.on:
            self.sync()
            if kind in self.warm:
                self.add(kind, time.perf_counter() - self.start - self.forward_s - self.drafting_s - self.heading_s)
                self.timed = self.timed[1 - self.RECENT:] + [(self.forward_s, self.curve(self.inputs))]
                if self.drafted:
                    self.add("draft_s", self.drafting_s / self.drafted)
                if self.heading_s:
                    self.add("head_s", self.heading_s)
            self.warm.add(kind)

    def add(self, kind: str, seconds: float) -> None:
        self.samples[kind] = self.samples[kind][1 - self.RECENT:] + [seconds]

    def estimate(self, kind: str) -> float:
        samples = self.samples[kind]
        return statistics.median(samples) if samples else 0.0

    def fit(self) -> tuple[float, float]:
        """(scale, excess): a forward at n inputs takes about curve(n) * scale + excess seconds."""
        if not self.timed:
            return 1.0, 0.0
        ratio = statistics.median(f / max(c, 1e-12) for f, c in self.timed)
        if ratio < 1.0:
            return ratio, 0.0
        return 1.0, statistics.median(f - c for f, c in self.timed)
