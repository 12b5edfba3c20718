import pytest
import torch

from mmspec.decoding.orders import GROUP_SIZES, LocalityOrder, ramp_group_sizes


def chebyshev(a: torch.Tensor, b: torch.Tensor, grid: int) -> torch.Tensor:
    """Chebyshev distances `[len(a), len(b)]` between raster cells."""
    ra, rb = torch.stack([a // grid, a % grid], -1), torch.stack([b // grid, b % grid], -1)
    return (ra[:, None] - rb[None]).abs().max(-1).values


@pytest.mark.parametrize("steps", [20, 32])
@pytest.mark.parametrize("repulsion", [1, 2])
def test_every_cell_once_in_groups_of_the_table_spread_apart_while_candidates_allow(steps, repulsion):
    order = LocalityOrder.for_steps(steps, grid_size=16, repulsion=repulsion)
    assert order.group_sizes == GROUP_SIZES[(256, steps)] and order.steps == steps
    assert [g.stop - g.start for g in order.groups()] == list(order.group_sizes)
    crowded_groups = 0
    for seed in range(12):
        cells = order.order(seed)
        assert sorted(cells.tolist()) == list(range(256))
        decoded = torch.zeros(256, dtype=torch.bool)
        for group in order.groups():
            members, crowded = cells[group], False
            for j in range(1, len(members)):
                if (chebyshev(members[j : j + 1], members[:j], 16) <= repulsion).any():
                    # allowed only when every cell still free was as close to the group's earlier cells
                    free = (~decoded).nonzero()[:, 0]
                    free = free[~torch.isin(free, members[:j])]
                    assert (chebyshev(free, members[:j], 16) <= repulsion).any(-1).all()
                    crowded = True
            crowded_groups += crowded
            decoded[members] = True
    assert crowded_groups < 0.35 * 12 * steps  # the exception, near the end of the order


def test_cells_are_taken_next_to_decoded_context():
    order = LocalityOrder.for_steps(20)
    with_context = total = 0
    for seed in range(8):
        decoded = torch.zeros(256, dtype=torch.bool)
        for group in order.groups()[1:]:
            cells = order.order(seed)[group]
            decoded_cells = decoded.nonzero()[:, 0]
            with_context += int((chebyshev(cells, decoded_cells, 16) == 1).any(-1).sum())
            total += len(cells)
            decoded[cells] = True
        decoded[order.order(seed)[order.groups()[0]]] = True
    assert with_context / total > 0.9


def test_orders_are_seeded_cached_and_drawn_from_the_generator():
    order = LocalityOrder.for_steps(32)
    assert order.order(7) is order.order(7)  # cached per configuration and seed
    assert not torch.equal(order.order(7), order.order(8))
    a = order.sample(3, torch.Generator().manual_seed(0))
    b = order.sample(3, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and not torch.equal(a[0], a[1])


def test_ramp_group_sizes_start_with_one_cell_grow_and_sum_exactly():
    for steps in (8, 12, 16, 24, 64, 128, 256):
        sizes = ramp_group_sizes(steps, 256)
        assert len(sizes) == steps and sum(sizes) == 256 and sizes[0] == 1
        assert all(a <= b for a, b in zip(sizes[1:], sizes[2:]))
    with pytest.raises(ValueError, match="steps must be in"):
        ramp_group_sizes(300, 256)


@pytest.mark.parametrize("make, message", [
    (lambda: LocalityOrder.for_steps(24), "no group-size table for 24 steps on a 16x16 grid; tables exist for 20, 32, 256 steps"),
    (lambda: LocalityOrder((1, 2), grid_size=4), "summing to 16 cells"),
    (lambda: LocalityOrder((16,), grid_size=4, repulsion=-1), "repulsion must be >= 0"),
])
def test_bad_orders_are_one_line_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()
