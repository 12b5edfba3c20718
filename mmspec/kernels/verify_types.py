"""The result type shared by every implementation of `verify`."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class VerifyOutput:
    """Attributes:
    accepted (`torch.Tensor`): long `[N]`, leading drafts accepted.
    committed (`torch.Tensor`): long `[N]`, slots committed: the accepted drafts plus the
        drawn token after them when that slot has a p.
    tokens (`torch.Tensor`): long `[N, S]`: accepted drafts, the drawn token at slot
        `accepted`, the next drafts after it (their q is the slot's p); past `num_slots`
        the input drafts are passed through.
    """

    accepted: torch.Tensor
    committed: torch.Tensor
    tokens: torch.Tensor
