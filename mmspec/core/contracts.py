"""The two contracts between the decoding engine and a model family.

The engine sees nothing else of a model: a `TokenModel` opens a `TokenSession` (the KV
cache of one call) and a `TokenLayout` says where each generated position sits and which
tokens it may hold. Images, video, audio frames, meshes and text are all a sequence of
`layout.length` positions; the grid gives each position its coordinates so that spatial
schedules (ZipAR, locality orders) and spatial draft initialisation can work on any of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch


@dataclass(frozen=True)
class TokenLayout:
    """Where the generated positions sit and what each may hold.

    Attributes:
        grid (`tuple[int, ...]`): the shape the positions fill in row-major order:
            `(rows, cols)` for an image, `(frames, rows, cols)` for video,
            `(frames, codebooks)` for multi-codebook audio, `(length,)` for text.
        vocab_size (`int`): size of the logits' last axis.
        allowed (`torch.Tensor`, *optional*): bool `[V]` (same set everywhere) or `[T, V]`
            (per position) of the tokens a position may hold; `None` allows all.
        forced (`torch.Tensor`, *optional*): long `[T]`, the token a position must hold
            (an end-of-line token, say) or -1 where it is free: `allowed_at` allows only
            that token there.
        token_embeddings (`torch.Tensor`, *optional*): `[V, E]`, a vector per token (VQ
            codebook entries) for latent-neighbourhood acceptance rules.
    """

    grid: tuple[int, ...]
    vocab_size: int
    allowed: torch.Tensor | None = None
    forced: torch.Tensor | None = None
    token_embeddings: torch.Tensor | None = None

    @property
    def length(self) -> int:
        n = 1
        for size in self.grid:
            n *= size
        return n

    @property
    def rows(self) -> int:
        """Rows of the last two grid axes (1 for a 1-D layout)."""
        return self.grid[-2] if len(self.grid) >= 2 else 1

    @property
    def cols(self) -> int:
        return self.grid[-1]

    def coords(self) -> torch.Tensor:
        """Long `[T, len(grid)]`: the grid coordinates of every position."""
        axes = [torch.arange(size) for size in self.grid]
        return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(self.length, len(self.grid))

    def allowed_at(self, positions: torch.Tensor) -> torch.Tensor | None:
        """Bool `[..., V]` allowed-token mask for long `positions [...]` (past the end: the
        last position's), or None when everything is allowed. A forced position allows
        only its forced token, so sampling and drafting need no special case for it."""
        if self.allowed is None and self.forced is None:
            return None
        positions = positions.clamp(max=self.length - 1)
        if self.allowed is None:
            mask = torch.ones(*positions.shape, self.vocab_size, dtype=torch.bool, device=positions.device)
        elif self.allowed.dim() == 1:
            mask = self.allowed.to(positions.device).expand(*positions.shape, self.vocab_size)
        else:
            mask = self.allowed.to(positions.device)[positions]
        if self.forced is not None:
            forced = self.forced.to(positions.device)[positions]
            one_hot = torch.nn.functional.one_hot(forced.clamp(min=0), self.vocab_size).bool()
            mask = torch.where((forced >= 0)[..., None], one_hot, mask)
        return mask


@dataclass
class GuidedLogits:
    """Logits of one forward: conditional rows, and unconditional rows under CFG.

    Attributes:
        cond (`torch.Tensor`): float `[B, n, V]`; entry j predicts the token after input j.
        uncond (`torch.Tensor`, *optional*): float `[B, n, V]`, same positions, null condition.
    """

    cond: torch.Tensor
    uncond: torch.Tensor | None = None


class TokenSession(Protocol):
    """The KV cache and condition of one generation call over `batch_size` sequences.

    Positions are 0-based indices into the generated sequence (the condition prefix is the
    model's business). Positions >= `layout.length` are scratch: their cache slots are never
    attended, so finished sequences and windows that run past the end can still ride along
    in a batched forward.
    """

    batch_size: int
    guided: bool  # whether forward returns unconditional logits too

    def prefill_logits(self) -> GuidedLogits:
        """`[B, 1, V]` logits for position 0, computed when the session was opened."""

    def forward(
        self, tokens: torch.Tensor, positions: torch.Tensor, segments: torch.Tensor | None = None
    ) -> GuidedLogits:
        """Runs `tokens [B, n]` at absolute `positions [B, n]` and writes their cache slots.

        A query attends to committed positions before its own and to the inputs of this
        same call with the same segment id (`segments [B, n]`, default all equal) whose
        position is not after its own; never to empty slots or uncommitted drafts.
        Returns logits whose entry j predicts position `positions[:, j] + 1`.
        """

    def commit(self, positions: torch.Tensor, mask: torch.Tensor) -> None:
        """Marks the slots of `positions [B, n]` where `mask [B, n]` as committed: their
        cache entries, written by the last forward that fed them, become visible to later
        queries. Everything not committed is discarded for free: it is never attended and
        the next forward at that position overwrites it."""


class TokenModel(Protocol):
    """A generator the engine can drive."""

    def layout(self) -> TokenLayout:
        """The layout of one generated sample."""

    def start(self, condition: Any, *, guided: bool, extra_positions: int = 0) -> TokenSession:
        """Allocates a cache for the batch of `condition` (both CFG halves when `guided`),
        prefills the condition, and returns the session. `extra_positions` scratch
        positions past the end are reserved for windows that overhang it."""
