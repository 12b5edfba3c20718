"""First drafts of window slots that have none yet (the SJD paper's initialisations).

A first draft is a point mass given everything before it, so its q is one-hot: random
drafts are uniform over the tokens the layout allows at that position (never outside
it, unlike the reference code); spatial drafts copy the token to the left or above
(committed, or the current draft there), falling back to random where there is none;
forced positions get their forced token.
"""

from __future__ import annotations

import torch

from mmspec.core.contracts import TokenLayout
from mmspec.core.sampling import categorical, uniforms


def first_drafts(
    best: torch.Tensor,  # [B, T] long: committed tokens and current drafts, -1 where none
    positions: torch.Tensor,  # [B, K] long: positions to draft, -1 = skip
    layout: TokenLayout,
    init: str,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """Drafts `[B, K]` for `positions`, filled left to right so that a "left" copy can
    take the draft just placed; writes them into `best` as it goes. -1 where skipped."""
    B, K = positions.shape
    V = layout.vocab_size
    device = best.device
    out = torch.full_like(positions, -1)
    u = uniforms((B, K), generator, device)
    cols = layout.cols
    rows = torch.arange(B, device=device)
    for k in range(K):
        pos = positions[:, k]
        live = pos >= 0
        if not bool(live.any()):
            continue
        safe = pos.clamp(min=0)
        allowed = layout.allowed_at(safe)
        weights = torch.ones(B, V, device=device) if allowed is None else allowed.to(device).float()
        draft = categorical(weights, u[:, k])
        if init != "random":
            offset = 1 if init == "left" else cols
            src = safe - offset
            has_src = src >= 0
            if init == "left":
                has_src &= safe % cols != 0
            copied = best[rows, src.clamp(min=0)]
            usable = has_src & (copied >= 0)
            if allowed is not None:
                usable &= allowed.to(device)[rows, copied.clamp(min=0)]
            draft = torch.where(usable, copied, draft)
        draft = torch.where(live, draft, torch.full_like(draft, -1))
        out[:, k] = draft
        best[rows[live], safe[live]] = draft[live]
    return out
