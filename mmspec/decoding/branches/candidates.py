"""The branch candidates of a window's leading slots: the steps next to each position on
the layout (`neighbour_sources`) and the likeliest others of the slot's carried q. The
loop hands them a read-only view of its windows (`Windows`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmspec.decoding.branches.setting import BranchSetting
from mmspec.decoding.steps import allowed_steps


def neighbour_sources(layout) -> torch.Tensor:
    """Long `[T, C]`: the positions near each position that come before it in the layout,
    -1 outside it: one to three steps back along every axis, and for each pair of axes
    the six diagonals one or two steps back along the first and one or two either way
    along the second (on a grid: three to the left, three above, and above-left,
    above-right, two above and one to either side, one above and two to either side)."""
    coords, shape = layout.coords, torch.tensor(layout.shape)
    A = coords.shape[1]
    offsets = []
    for a in range(A):
        for back in (1, 2, 3):
            offsets.append(torch.zeros(A, dtype=torch.long).index_fill(0, torch.tensor(a), -back))
        for a2 in range(a + 1, A):  # a second axis
            for back, side in ((1, -1), (1, 1), (2, -1), (2, 1), (1, -2), (1, 2)):
                o = torch.zeros(A, dtype=torch.long)
                o[a], o[a2] = -back, side
                offsets.append(o)
    strides = torch.cat([shape[1:].flip(0).cumprod(0).flip(0), torch.ones(1, dtype=torch.long)])
    lookup = torch.full((int(shape.prod()),), -1, dtype=torch.long)
    lookup[(coords * strides).sum(-1)] = torch.arange(layout.length)
    source = coords[:, None, :] + torch.stack(offsets)[None]  # [T, C, A]
    inside = ((source >= 0) & (source < shape)).all(-1)
    found = lookup[(source.clamp(min=0) * strides).sum(-1).clamp(max=len(lookup) - 1)]
    return torch.where(inside, found, -1)


@dataclass
class Windows:
    """What branches see of the loop's windows at one forward."""

    n: torch.Tensor  # [B, R]: each window's first undecoded position
    drafts: torch.Tensor  # [B, R, L, K], -1 = none
    q: torch.Tensor  # [B, R, L, K, V]: the q each draft was drawn from
    carried: torch.Tensor  # [B, R, L] bool: q is the p of the last forward (else one-hot, a first draft)
    tokens: torch.Tensor  # [B, T, K]
    committed: torch.Tensor  # [B, T] bool


def branch_candidates(windows: Windows, setting: BranchSetting, sources: torch.Tensor, layout) -> tuple[torch.Tensor, torch.Tensor]:
    """Each leading slot's candidate steps, long `[B, R, D, C, K]` and whether each is
    one: the steps next to its position (what it sees there: committed steps or the
    window's drafts before it), then its draft with one codebook's token replaced by
    one of the m most likely others of its carried q (with K = 1, the m most likely
    tokens), without repeats, without the slot's own draft, and only steps the layout
    allows there."""
    B, R, L, K = windows.drafts.shape
    device = windows.n.device
    T, V = windows.tokens.shape[1], windows.q.shape[-1]
    D, m = min(setting.slots, L), setting.candidates
    draft = windows.drafts[:, :, :D]  # [B, R, D, K]
    pos = (windows.n[..., None] + torch.arange(D, device=device)).clamp(max=T - 1)  # [B, R, D]
    src = sources[pos]  # [B, R, D, C_near]
    known = torch.where(windows.committed[..., None], windows.tokens, -1)  # [B, T, K]
    near = known.gather(1, src.clamp(min=0).view(B, -1, 1).expand(-1, -1, K)).view(*src.shape, K)
    in_window = src - windows.n[..., None, None]  # the window slot of a source at or after n
    from_draft = windows.drafts.gather(2, in_window.clamp(0, L - 1).view(B, R, -1, 1).expand(-1, -1, -1, K)).view_as(near)
    near = torch.where((in_window >= 0)[..., None], from_draft, near).masked_fill((src < 0)[..., None], -1)
    q = windows.q[:, :, :D] * windows.carried[..., :D, None, None]  # one-hot first drafts offer none of their own
    mass, likely = q.scatter(-1, draft.clamp(min=0)[..., None], 0.0).topk(min(m, V), dim=-1)  # [B, R, D, K, m]
    # codebook g's alternatives [B, R, D, K, m, K]: the draft step with its token g replaced
    own = torch.eye(K, dtype=torch.bool, device=device)[:, None, :]  # [K (swapped), 1, K]
    swapped = torch.where(own, likely[..., None], draft[..., None, None, :])
    swapped = swapped.masked_fill((mass == 0)[..., None], -1).flatten(3, 4)
    tokens = torch.cat([near, swapped], 3)  # [B, R, D, C, K]
    C = tokens.shape[3]
    earlier = torch.ones(C, C, dtype=torch.bool, device=device).tril(-1)
    repeat = (((tokens[..., :, None, :] == tokens[..., None, :, :]).all(-1)) & earlier).any(-1)
    ok = (tokens >= 0).all(-1) & ~repeat & (tokens != draft[..., None, :]).any(-1)
    allowed = allowed_steps(layout, pos)
    if allowed is not None:  # [B, R, D, K, V]: forced slots hold their token
        fits = allowed[..., None, :, :].expand(-1, -1, -1, C, -1, -1).gather(-1, tokens.clamp(min=0)[..., None])
        ok &= fits[..., 0].all(-1)
    return tokens, ok

