"""What a branch setting asks for: candidates per slot, slots, branch length (m x D x c),
how many branch nodes it adds to a window, and whether a session can run it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BranchSetting:
    """Branches at the first `slots` window slots: `candidates` per slot (m; per codebook
    with K tokens a step), each followed by `length` of the window's next drafts (c)."""

    candidates: int
    slots: int
    length: int

    def __str__(self) -> str:
        return f"{self.candidates}x{self.slots}x{self.length}"


def preset_settings(profile) -> tuple[BranchSetting, ...]:
    """auto's branch settings on a device (`DeviceProfile.branch_presets`): none on a CPU."""
    return tuple(BranchSetting(*preset) for preset in profile.branch_presets)


def check_branches(session) -> None:
    if not getattr(session, "supports_tree", False):
        raise ValueError(f"branches need tree attention, which {type(session).__name__} does not offer; decode with branches=0")


def branch_nodes(setting, window: int, layout) -> int:
    """Branch nodes of one window at most, for a `BranchSetting` (m, D, c)."""
    per_slot = setting.candidates * layout.tokens_per_step + 3 * len(layout.axes) * len(layout.axes)  # q's, then the neighbours
    return min(setting.slots, window) * per_slot * (setting.length + 1)

