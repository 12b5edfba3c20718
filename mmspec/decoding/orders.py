"""Generation orders for flexible-order models: LPD's locality-aware order, as an object.

A group-size table says how many cells each step decodes (20 steps for 256 cells, say);
`LocalityOrder` says which: after a random first cell, each step takes the undecoded cells
with the most decoded context next to them (the proximity score: the sum of 1/distance to
decoded cells in the 3x3 neighbourhood), skipping any cell within `repulsion` (Chebyshev)
of a cell already taken in the same step, since cells decoded together cannot see each
other's tokens; when those run out, it fills the group by farthest-point sampling.
This is the order of Zhang et al., "Locality-aware Parallel Decoding" (mit-han-lab/lpd),
which precomputes 50,000 orders offline; here an order is a function of its configuration
and a seed drawn from the caller's generator, computed on first use and cached.

Example:
    >>> import torch
    >>> order = LocalityOrder.for_steps(20, grid_size=16)
    >>> cells = order.sample(2, torch.Generator().manual_seed(0))
    >>> cells.shape, sorted(cells[0].tolist()) == list(range(256))
    (torch.Size([2, 256]), True)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

# LPD's group sizes for a 16x16 grid (orders/group_sizes_lookup.json, "256 resolution")
GROUP_SIZES = {
    (256, 20): (1, 2, 4, 5, 7, 8, 10, 11, 12, 14, 15, 16, 17, 18, 18, 19, 19, 20, 20, 20),
    (256, 32): (1, 1, 2, 2, 3, 3, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 10, 11, 11, 11, 11, 12, 12, 12, 12, 12, 12, 12, 12),
}


def ramp_group_sizes(steps: int, cells: int) -> tuple[int, ...]:
    """A group-size table of `steps` groups over `cells` cells shaped like LPD's: one cell
    first, then groups growing on a concave ramp (largest remainders keep the sum exact).
    What training draws its random group schedules from."""
    if not 1 <= steps <= cells:
        raise ValueError(f"steps must be in [1, {cells}] for {cells} cells, got {steps}")
    if steps == 1:
        return (cells,)
    k = torch.arange(1, steps, dtype=torch.float64)
    weights = 1 - (1 - k / (steps - 1)) ** 2 + 1 / steps
    share = weights / weights.sum() * (cells - steps) + 1  # every group at least one cell
    sizes = share.floor().long()
    short = cells - 1 - int(sizes.sum())
    sizes[torch.argsort(share - sizes, descending=True)[:short]] += 1
    return (1, *sizes.tolist())


@dataclass(frozen=True)
class LocalityOrder:
    """LPD's locality-aware order over a `grid_size x grid_size` grid.

    Args:
        group_sizes: cells per step; they sum to the grid's cell count.
        grid_size: cells per side.
        proximity: the proximity score a cell needs to be taken for its context (LPD: 1).
        repulsion: cells of one group are more than this apart (Chebyshev) while proximity
            candidates allow (LPD: 1, or 2 for its 20-step results).
    """

    group_sizes: tuple[int, ...]
    grid_size: int = 16
    proximity: float = 1.0
    repulsion: int = 1

    name = "lpd-order"

    def __post_init__(self):
        cells = self.grid_size**2
        if any(not isinstance(s, int) or s < 1 for s in self.group_sizes) or sum(self.group_sizes) != cells:
            raise ValueError(f"group sizes must be positive integers summing to {cells} cells, got {self.group_sizes}")
        if self.repulsion < 0:
            raise ValueError(f"repulsion must be >= 0, got {self.repulsion}")

    @classmethod
    def for_steps(cls, steps: int, grid_size: int = 16, **kwargs) -> "LocalityOrder":
        """The order with LPD's group-size table for `steps` steps on this grid (one cell per
        step when `steps` is the cell count)."""
        sizes = (1,) * steps if steps == grid_size**2 else GROUP_SIZES.get((grid_size**2, steps))
        if sizes is None:
            known = sorted(s for n, s in GROUP_SIZES if n == grid_size**2)
            raise ValueError(f"no group-size table for {steps} steps on a {grid_size}x{grid_size} grid; "
                             f"tables exist for {', '.join(map(str, [*known, grid_size**2]))} steps")
        return cls(sizes, grid_size, **kwargs)

    @property
    def steps(self) -> int:
        return len(self.group_sizes)

    def order(self, seed: int) -> torch.Tensor:
        """Raster cell indices `[cells]` in generation order; a function of the seed, cached."""
        return _locality_order(self, seed)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """`[batch_size, cells]` orders, their seeds drawn from `generator`."""
        return self.for_seeds(torch.randint(2**31 - 1, (batch_size,), generator=generator))

    def for_seeds(self, seeds: torch.Tensor) -> torch.Tensor:
        """`[len(seeds), cells]`: the order of each seed."""
        return torch.stack([self.order(int(s)) for s in seeds])

    def groups(self) -> list[slice]:
        """The slices of an order that each step decodes."""
        ends = torch.tensor(self.group_sizes).cumsum(0).tolist()
        return [slice(end - size, end) for size, end in zip(self.group_sizes, ends)]


@functools.lru_cache(maxsize=4096)
def _locality_order(config: LocalityOrder, seed: int) -> torch.Tensor:
    g = config.grid_size
    generator = torch.Generator().manual_seed(seed)
    rc = torch.stack(torch.meshgrid(torch.arange(g), torch.arange(g), indexing="ij"), -1).view(-1, 2)  # [T, 2]
    delta = (rc[:, None] - rc[None]).abs()
    chebyshev = delta.max(-1).values  # [T, T]
    euclid = delta.float().norm(dim=-1)
    closeness = torch.where(chebyshev == 1, 1 / euclid.clamp(min=1e-9), torch.zeros(()))  # 1 or 1/sqrt(2) for neighbours
    taken = torch.zeros(g * g, dtype=torch.bool)
    order: list[int] = []
    for step, size in enumerate(config.group_sizes):
        free = (~taken).nonzero()[:, 0]
        tiebreak = torch.rand(len(free), generator=generator)
        if step == 0:
            picked, rest = [], free[torch.argsort(tiebreak)].tolist()
        else:
            shuffled = torch.argsort(tiebreak)
            by_score = torch.sort(closeness[free[shuffled]][:, taken].sum(-1), descending=True, stable=True)  # ties in random order
            ranked = free[shuffled[by_score.indices]].tolist()
            good = (by_score.values >= config.proximity).tolist()
            picked, skipped, unseen = [], [], [c for c, ok in zip(ranked, good) if ok]
            while unseen and len(picked) < size:
                cell = unseen.pop(0)
                crowded = picked and bool((chebyshev[cell, picked] <= config.repulsion).any())
                (skipped if crowded else picked).append(cell)
            rest = [c for c, ok in zip(ranked, good) if not ok] + skipped + unseen
        picked += _farthest_points(picked, rest, size - len(picked), euclid, generator)
        order += picked
        taken[picked] = True
    return torch.tensor(order)


def _farthest_points(existing: list[int], candidates: list[int], n: int, dist: torch.Tensor, generator) -> list[int]:
    """`n` of `candidates`, each the farthest (Euclidean) from `existing` and those chosen before
    it (the first at random when there is nothing yet); ties go to the earlier candidate."""
    if n <= 0:
        return []
    if len(candidates) <= n:
        return list(candidates)
    chosen: list[int] = []
    pool = torch.tensor(candidates)
    if not existing:
        chosen.append(candidates[int(torch.randint(len(candidates), (1,), generator=generator))])
    while len(chosen) < n:
        nearest = dist[pool][:, existing + chosen].min(-1).values
        chosen.append(int(pool[nearest.argmax()]))
    return chosen
