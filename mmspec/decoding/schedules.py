"""Schedules: which positions a Jacobi loop may work on, as small objects.

A schedule cuts the layout into segments, runs of consecutive positions that are decoded
left to right by one window each, and says when each segment opens: once its parent
segment has `need` committed tokens. The loop asks the plan and never reads a layout's
shape:

- `Raster()`: one segment, the whole sequence (exact);
- `ZipAR(window, axis="row")`: the runs of the layout along `axis` (rows, or the rows of
  every frame); run r opens once run r-1 has `window` tokens (He et al., 2024);
- `Frames(rows, zipar_window=None)`: locality in three dimensions: frame f opens once
  frame f-1 has `rows` committed rows; inside a frame, raster order, or ZipAR rows.

Every segment but the first of `Raster` starts before its predecessor is done, so it
decodes without part of its context: ZipAR and frame schedules are not exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmspec.core.layout import TokenLayout


@dataclass(frozen=True)
class SegmentPlan:
    """Attributes (all long `[R]`):
    starts, ends: the positions `[start, end)` of each segment.
    parent: the segment that must progress before this one opens (-1: open from the start).
    need: committed tokens the parent must have (capped at its length).
    """

    starts: torch.Tensor
    ends: torch.Tensor
    parent: torch.Tensor
    need: torch.Tensor

    def __len__(self) -> int:
        return len(self.starts)


def check_count(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def chained(starts: torch.Tensor, ends: torch.Tensor, need: torch.Tensor | int) -> SegmentPlan:
    """Segment r waits on segment r-1 for `need` tokens (the first waits on none)."""
    R = len(starts)
    parent = torch.arange(-1, R - 1)
    need = torch.as_tensor(need).expand(R)
    parent_len = torch.where(parent >= 0, (ends - starts)[parent.clamp(min=0)], 0)
    return SegmentPlan(starts, ends, parent, torch.minimum(need, parent_len))


@dataclass(frozen=True)
class Raster:
    """One window over the whole sequence, in generation order."""

    name = "raster"
    exact = True

    def plan(self, layout: TokenLayout) -> SegmentPlan:
        return chained(torch.tensor([0]), torch.tensor([layout.length]), 0)


@dataclass(frozen=True)
class ZipAR:
    """ZipAR: the runs along `axis` decoded side by side, each `window` tokens behind the last."""

    window: int = 8
    axis: str = "row"

    name = "zipar"
    exact = False

    def __post_init__(self):
        check_count("zipar_window", self.window)

    def plan(self, layout: TokenLayout) -> SegmentPlan:
        starts, ends = layout.runs(self.axis)
        if len(starts) < 2:
            raise ValueError(f"ZipAR decodes {self.axis}s side by side; this layout has a single {self.axis}")
        return chained(starts, ends, self.window)


@dataclass(frozen=True)
class Frames:
    """Frame f opens once frame f-1 has `rows` committed rows (runs along `row_axis`);
    within a frame, raster order, or ZipAR rows `zipar_window` tokens apart."""

    rows: int = 2
    zipar_window: int | None = None
    frame_axis: str = "frame"
    row_axis: str = "row"

    name = "frames"
    exact = False

    def __post_init__(self):
        check_count("frame schedule rows", self.rows)
        if self.zipar_window is not None:
            check_count("zipar_window", self.zipar_window)

    def plan(self, layout: TokenLayout) -> SegmentPlan:
        frame_starts, frame_ends = layout.runs(self.frame_axis)
        row_starts, row_ends = layout.runs(self.row_axis)
        # the tokens of frame f in its first `rows` rows: what frame f+1 waits for
        frame_of_row = torch.searchsorted(frame_starts, row_starts, right=True) - 1
        first_row = torch.searchsorted(row_starts, frame_starts)
        last_needed = torch.minimum(first_row + self.rows, torch.searchsorted(row_starts, frame_ends)) - 1
        opening = row_ends[last_needed] - frame_starts  # [F]
        if self.zipar_window is None:
            plan = chained(frame_starts, frame_ends, 0)
            return SegmentPlan(plan.starts, plan.ends, plan.parent, torch.cat([opening[:1] * 0, opening[:-1]]))
        plan = chained(row_starts, row_ends, self.zipar_window)
        parent, need = plan.parent.clone(), plan.need.clone()
        opens_frame = (row_starts == frame_starts[frame_of_row]) & (frame_of_row > 0)
        prev_frame = frame_of_row[opens_frame] - 1
        parent[opens_frame] = last_needed[prev_frame]
        need[opens_frame] = (row_ends - row_starts)[last_needed[prev_frame]]
        return SegmentPlan(row_starts, row_ends, parent, need)
