"""Group-by-group decoding of an LPD model: one forward per group of the order.

Each step samples the queried group from its logits, with LPD's linear guidance schedule
(`linear_guidance`: the scale grows with a token's place in the order)
and the usual temperature / top-k / top-p, every draw from the caller's generator.

Example:
    >>> import torch
    >>> from mmspec.core.sampling import SamplingConfig
    >>> from mmspec.decoding.orders import LocalityOrder
    >>> from mmspec.models.lpd import LPD, LPDConfig
    >>> model = LPD(LPDConfig(img_size=64, vqgan_stride=16, decoder_embed_dim=32, decoder_depth=1,
    ...                       decoder_num_heads=2, class_num=3, vqgan_vocab_size=16)).eval()
    >>> order = LocalityOrder((1, 3, 5, 7), grid_size=4)
    >>> out = generate_lpd(model, torch.tensor([0, 2]), order, SamplingConfig(guidance_scale=2.0),
    ...                    generator=torch.Generator().manual_seed(0))
    >>> out.tokens.shape, out.forward_passes
    (torch.Size([2, 16]), 4)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmspec.core.sampling import SamplingConfig, classifier_free_guidance, sample, transform
from mmspec.decoding.orders import LocalityOrder


def linear_guidance(order_index: torch.Tensor, cells: int, scale: float) -> torch.Tensor:
    """LPD's linear CFG schedule: the guidance of the token at place `order_index` in the
    order grows from 1 at the first to `scale` at the end, `1 + (scale - 1) * i / cells`."""
    return 1 + (scale - 1) * order_index.float() / cells


@dataclass(frozen=True)
class LPDDecoding:
    """How an LPD pipeline decodes, by name as the CLI and benchmarks give it: "lpd-20",
    "lpd-32" (`steps` forwards, LPD's group sizes), or "ar" (one cell per forward, in the
    locality-aware order: the LPD model's own one-token-per-step baseline).
    `repulsion`: the order's, or None for the pipeline's."""

    steps: int | None = 20  # None: one cell per step
    repulsion: int | None = None

    exact = True  # each group is drawn from the model's own distribution over it

    @property
    def name(self) -> str:
        return "ar" if self.steps is None else "lpd"

    def describe(self) -> str:
        return "ar" if self.steps is None else f"lpd-{self.steps}"

    @classmethod
    def from_name(cls, name: str) -> "LPDDecoding":
        if name == "ar":
            return cls(None)
        prefix, _, steps = name.partition("-")
        if prefix != "lpd" or not steps.isdigit() or int(steps) < 1:
            raise ValueError(f"an LPD pipeline decodes group by group: choose lpd-<steps> (lpd-20, lpd-32) or ar, got {name!r}")
        return cls(int(steps))


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
    generator: torch.Generator | None = None,
    orders: torch.Tensor | None = None,
    guidance_schedule: str = "linear",
) -> LPDOutput:
    """Decodes one image per label in `order.steps` forwards.

    Args:
        model: an LPD model (`mmspec.models.lpd.LPD`), whose `start` opens its cached session.
        orders: `[B, T]` raster cells in generation order; by default drawn from `order`
            (its seeds from `generator`). Their group sizes are `order.group_sizes` either way.
        guidance_schedule: "linear" (LPD's) or "constant" (the full scale for every token).
    """
    check_guidance_schedule(guidance_schedule)
    T = model.config.seq_len
    if order.grid_size**2 != T:
        raise ValueError(f"the order is for a {order.grid_size}x{order.grid_size} grid; the model makes {T} cells")
    labels = torch.as_tensor(labels, device=model.device).long()
    if orders is None:
        orders = order.sample(len(labels), generator)
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
        previous = sample(transform(x, sampling), generator)
        in_order[:, group] = previous
    tokens = torch.empty_like(orders).scatter_(1, orders, in_order)
    step_of_place = torch.repeat_interleave(torch.arange(order.steps, device=orders.device),
                                            torch.tensor(order.group_sizes, device=orders.device))
    step_of_cell = torch.empty_like(orders).scatter_(1, orders, step_of_place.expand_as(orders).contiguous())
    return LPDOutput(tokens, orders, step_of_cell, order.steps)
