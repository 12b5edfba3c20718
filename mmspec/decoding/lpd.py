"""Group-by-group decoding of an LPD model: one forward per group of the order.

`generate(model, labels, "lpd-20")` runs it (`decode_lpd`) when the model decodes in
groups (`decodes_in_groups`, `mmspec.core.contracts.GroupModel`), returning tokens and a
`DecodeStats` like every other method; `generate_lpd` is the loop itself, with its orders.

Each step samples the queried group from its logits, with LPD's linear guidance schedule
(`linear_guidance`: the scale grows with a token's place in the order)
and the usual temperature / top-k / top-p, every draw Gumbel-max under keyed noise
(`mmspec.core.noise`) keyed by the raster cell, the order's seed from the same keys.

Example:
    >>> import torch
    >>> from mmspec.core.sampling import SamplingConfig
    >>> from mmspec.decoding.orders import LocalityOrder
    >>> from mmspec.models.networks.lpd import LPD, LPDConfig
    >>> model = LPD(LPDConfig(img_size=64, vqgan_stride=16, decoder_embed_dim=32, decoder_depth=1,
    ...                       decoder_num_heads=2, class_num=3, vqgan_vocab_size=16)).eval()
    >>> order = LocalityOrder((1, 3, 5, 7), grid_size=4)
    >>> out = generate_lpd(model, torch.tensor([0, 2]), order, SamplingConfig(guidance_scale=2.0),
    ...                    generator=torch.Generator().manual_seed(0))
    >>> out.tokens.shape, out.forward_passes
    (torch.Size([2, 16]), 4)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from mmspec.core.noise import Noise, as_noise
from mmspec.core.sampling import SamplingConfig, classifier_free_guidance, transformed_scores
from mmspec.decoding.config import LPDDecoding  # noqa: F401 (its old home: still importable from here)
from mmspec.decoding.orders import LocalityOrder
from mmspec.decoding.stats import DecodeStats


def linear_guidance(order_index: torch.Tensor, cells: int, scale: float) -> torch.Tensor:
    """LPD's linear CFG schedule: the guidance of the token at place `order_index` in the
    order grows from 1 at the first to `scale` at the end, `1 + (scale - 1) * i / cells`."""
    return 1 + (scale - 1) * order_index.float() / cells


@dataclass
class LPDOutput:
    """Attributes:
    tokens: long `[B, T]` in raster order.
    orders: long `[B, T]`, the raster cells in the order they were decoded.
    step_of_cell: long `[B, T]`, raster order: the forward (0-based) that produced each cell.
    forward_passes: forwards run (one per group).
    """

    tokens: torch.Tensor
    orders: torch.Tensor
    step_of_cell: torch.Tensor
    forward_passes: int


GUIDANCE_SCHEDULES = ("linear", "constant")


def check_guidance_schedule(name: str) -> str:
    if name not in GUIDANCE_SCHEDULES:
        raise ValueError(f"unknown guidance schedule {name!r}; choose from {', '.join(GUIDANCE_SCHEDULES)}")
    return name


@torch.no_grad()
def generate_lpd(
    model: torch.nn.Module,
    labels: torch.Tensor,
    order: LocalityOrder,
    sampling: SamplingConfig,
    generator: torch.Generator | list | Noise | None = None,
    orders: torch.Tensor | None = None,
    guidance_schedule: str = "linear",
    on_step: Callable[[int, int], None] | None = None,
) -> LPDOutput:
    """Decodes one image per label in `order.steps` forwards.

    Args:
        model: an LPD model (`mmspec.models.networks.lpd.LPD`), whose `start` opens its cached session.
        generator: read once for a key per image (`mmspec.core.noise`): the order's seed
            and each cell's Gumbel-max draw, keyed by its raster cell, come from it.
        orders: `[B, T]` raster cells in generation order; by default drawn from `order`
            (its seeds from the keys). Their group sizes are `order.group_sizes` either way.
        guidance_schedule: "linear" (LPD's) or "constant" (the full scale for every token).
        on_step: called with (cells decoded per image, cells per image) after each forward.
    """
    check_guidance_schedule(guidance_schedule)
    T = model.config.seq_len
    if order.grid_size**2 != T:
        raise ValueError(f"the order is for a {order.grid_size}x{order.grid_size} grid; the model makes {T} cells")
    labels = torch.as_tensor(labels, device=model.device).long()
    rows = torch.arange(len(labels), device=model.device)
    noise = as_noise(generator, len(labels), model.device)
    if orders is None:
        seeds = noise.uniform("order", rows, torch.zeros_like(rows)[:, None])[:, 0, 0] * (2**31 - 1)
        orders = order.for_seeds(seeds.long())
    orders = orders.to(model.device)
    session = model.start(labels, orders, guided=sampling.guided)
    in_order = torch.empty_like(orders)
    previous = None
    for group in order.groups():
        logits = session.step(previous, group.stop - group.start)
        x = logits.cond
        if sampling.guided:
            places = torch.arange(group.start, group.stop, device=x.device)
            scale = linear_guidance(places, T, sampling.guidance_scale) if guidance_schedule == "linear" \
                else torch.full((len(places),), sampling.guidance_scale, device=x.device)
            x = classifier_free_guidance(logits.uncond, x, scale[None, :, None].to(x.dtype))
        cells = orders[:, group]  # each cell's draw is keyed by the cell, whatever the group
        scores = transformed_scores(x, sampling)[:, :, None]
        previous = noise.winners(scores, rows, cells, greedy=sampling.temperature == 0)[..., 0]
        in_order[:, group] = previous
        if on_step:
            on_step(group.stop, T)
    tokens = torch.empty_like(orders).scatter_(1, orders, in_order)
    step_of_place = torch.repeat_interleave(torch.arange(order.steps, device=orders.device),
                                            torch.tensor(order.group_sizes, device=orders.device))
    step_of_cell = torch.empty_like(orders).scatter_(1, orders, step_of_place.expand_as(orders).contiguous())
    return LPDOutput(tokens, orders, step_of_cell, order.steps)


def lpd_order(model, decoding: LPDDecoding) -> LocalityOrder:
    """The locality-aware order of `decoding` on the model's grid: LPD's group sizes for
    its steps (one cell per step for "ar"), its repulsion (1 when unset)."""
    g = model.config.grid_size
    return LocalityOrder.for_steps(decoding.steps or g * g, g, repulsion=1 if decoding.repulsion is None else decoding.repulsion)


@torch.no_grad()
def decode_lpd(
    model: torch.nn.Module,
    labels: torch.Tensor,
    decoding: LPDDecoding,
    sampling: SamplingConfig,
    generator: torch.Generator | None = None,
    on_step: Callable[[int, int], None] | None = None,
    guidance_schedule: str = "linear",
) -> tuple[torch.Tensor, DecodeStats]:
    """`generate`'s LPD path: one image per label in `decoding`'s order (`lpd_order`).

    Returns tokens `[B, T]` in raster order and a `DecodeStats` (`commit_iteration`: the
    forward, 0-based, that drew each cell; `forward_passes`: one per group)."""
    started = time.perf_counter()
    out = generate_lpd(model, labels, lpd_order(model, decoding), sampling, generator, guidance_schedule=guidance_schedule,
                       on_step=on_step)
    stats = DecodeStats(decoding.describe(), decoding.exact, out.forward_passes, out.tokens.numel(),
                        time.perf_counter() - started, out.step_of_cell)
    return out.tokens, stats
