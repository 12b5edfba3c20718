"""What one Jacobi forward takes and gives back, between the loop's phases: the packed
inputs of every window (`Inputs`, from `pack_inputs`, extended by branches) and the
verification of the live windows spread over all of them (`Verified`, for `commit_and_slide`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmspec.core.contracts import CallTree


@dataclass
class Inputs:
    """One forward's packed inputs `[B, M]` and how they map back to window slots."""

    tokens: torch.Tensor  # [B, M, K]
    positions: torch.Tensor  # [B, M]; scratch positions >= T where padding
    segments: torch.Tensor | None  # [B, M]; None in raster order (one segment)
    valid: torch.Tensor  # [B, M] bool
    take: torch.Tensor  # [B, M]: input -> window input index (r * S + t)
    num_slots: torch.Tensor  # [B, R]: window slots that get a p (0 for a closed window)
    slot_input: torch.Tensor  # [B, R*S]: window input -> input index
    on_committed_context: torch.Tensor  # [B, R*S] bool: the window input's context is committed
    tree: CallTree | None = None  # with branches: the main inputs, then the branch nodes


@dataclass
class Verified:
    """Verification of the live windows `(b, r)`, spread over every window `[B, R]`
    (nothing committed where a window is closed; its drafts pass through)."""

    run_length: torch.Tensor  # [B, R]: slots committed (the accepted drafts and the drawn step)
    accepted: torch.Tensor  # [B, R]
    tokens: torch.Tensor  # [B, R, S, K]
    target_probs: torch.Tensor  # [N, Sv, K, V], live windows only, the verified slots
    b: torch.Tensor  # [N]
    r: torch.Tensor  # [N]

    @classmethod
    def scatter(cls, out, b: torch.Tensor, r: torch.Tensor, drafts: torch.Tensor, S: int) -> "Verified":
        B, R, L, K = drafts.shape
        Sv = out.tokens.shape[1]  # the verified slots; the later ones pass their drafts through
        if len(b) == B * R:  # every window is live
            view = lambda x: x.view(B, R, *x.shape[1:])
            tokens = view(out.tokens) if Sv == S else torch.cat([view(out.tokens), drafts[:, :, Sv:], drafts.new_full((B, R, 1, K), -1)], 2)
            return cls(view(out.run_length), view(out.accepted), tokens, out.target_probs, b, r)
        run_length = torch.zeros(B, R, dtype=torch.long, device=drafts.device)
        accepted = torch.zeros_like(run_length)
        tokens = torch.cat([drafts, drafts.new_full((B, R, S - L, K), -1)], 2)
        run_length[b, r], accepted[b, r] = out.run_length, out.accepted
        tokens[b, r, :Sv] = out.tokens
        return cls(run_length, accepted, tokens, out.target_probs, b, r)
