"""The contracts between the decoding engine and a model family.

The engine sees nothing else of a model: a `TokenModel` opens a `TokenSession` (the KV
cache of one call) and a `TokenLayout` (`mmspec.core.layout`) says where each generated
position sits and which tokens it may hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from mmspec.core.layout import TokenLayout


@dataclass
class GuidedLogits:
    """Logits of one forward: conditional rows, and unconditional rows under CFG.

    Attributes:
        cond (`torch.Tensor`): float `[B, n, V]` (`[B, n, K, V]` for K tokens per step);
            entry j predicts the step after input j.
        uncond (`torch.Tensor`, *optional*): the same for the null condition.
        hidden (`torch.Tensor`, *optional*): float `[rows, n, D]`, the hidden states the
            logits were read from (the session's `hidden_layers`, concatenated), the
            conditional rows then the unconditional ones; only when the session was asked
            for them. Learned draft heads read them (`mmspec.models.networks.draft_head`).
    """

    cond: torch.Tensor
    uncond: torch.Tensor | None = None
    hidden: torch.Tensor | None = None


@dataclass
class Rejected:
    """What a head reads at the commit front after a rejection: the rejected draft there
    (`tokens [R, n]`) and the target's fused hidden state on it (`features [R, n, dim]`:
    the context before was right, that token wrong). It holds the target's whole view of the
    context, off by one token, which the head corrects."""

    tokens: torch.Tensor
    features: torch.Tensor


@dataclass
class CallTree:
    """Tree attention for one forward: several inputs may stand for the same position
    (candidate tokens for it), each seeing its own ancestors in the call.

    Attributes:
        acts_as (`torch.Tensor`): long `[B, n]`, the position each input stands for: its
            rotary position, and it sees the committed positions before it.
        visible (`torch.Tensor`): bool `[B, n, n]`; `visible[b, i, j]`: input i sees input j
            of the call (its ancestors and itself).
    """

    acts_as: torch.Tensor
    visible: torch.Tensor


class TokenSession(Protocol):
    """The KV cache and condition of one generation call over `batch_size` sequences.

    Positions are 0-based indices into the generated sequence (the condition prefix is the
    model's business). Positions >= `layout.length` are scratch: their cache slots are never
    attended, so finished sequences and windows that run past the end can still ride along
    in a batched forward.

    A layout with K tokens per step takes `tokens [B, n, K]` and returns `[B, n, K, V]`
    logits; with one token per step, `[B, n]` and `[B, n, V]`.
    """

    batch_size: int
    guided: bool  # whether forward returns unconditional logits too
    # sessions that offer hidden states have `hidden_layers` (None: not returned); setting it
    # to layer indices makes every forward return their outputs in `GuidedLogits.hidden`
    prompt_tokens: torch.Tensor | None  # long [B, P], -1 = padding: what drafters may look up; None without

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

        A session that offers tree attention (`supports_tree = True`) also takes
        `tree=CallTree(...)`: `positions` then say where each input's keys are written (a
        scratch position for a second candidate of one position), `tree.acts_as` which
        position it stands for (entry j predicts `acts_as[:, j] + 1`), and `tree.visible`
        what it sees of the call, instead of segments.
        """

    def commit(self, positions: torch.Tensor, mask: torch.Tensor) -> None:
        """Marks the slots of `positions [B, n]` where `mask [B, n]` as committed: their
        cache entries, written by the last forward that fed them, become visible to later
        queries. Everything not committed is discarded for free: it is never attended and
        the next forward at that position overwrites it."""

    def relocate(self, sources: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> None:
        """Tree sessions only: copies the cache entries written at `sources [B, n]` (tree
        candidates kept at scratch positions) to the slots of `positions [B, n]` where
        `mask`; `commit` them afterwards."""


class TokenModel(Protocol):
    """A generator the engine can drive."""

    def layout(self) -> TokenLayout:
        """The layout of one generated sample."""

    def start(self, condition: Any, *, guided: bool, extra_positions: int = 0) -> TokenSession:
        """Allocates a cache for the batch of `condition` (both CFG halves when `guided`),
        prefills the condition, and returns the session. `extra_positions` scratch
        positions past the end are reserved for windows that overhang it."""


class GroupSession(Protocol):
    """The cache of one group-by-group call (LPD's) over an order of the grid's cells."""

    batch_size: int

    def step(self, previous: torch.Tensor | None, group: int) -> GuidedLogits:
        """Feeds `previous [B, m]`, the tokens drawn for the group queried last (None at
        first), and queries the next `group` cells of the order: their logits `[B, group, V]`."""


class GroupModel(Protocol):
    """A generator that decodes a group of cells per forward, in an order of its grid it is
    given (LPD). `generate` runs such a model group by group (`mmspec.decoding.lpd`) when it
    declares `decodes_in_groups = True`; `config.grid_size` and `config.seq_len` give its
    grid, `device` where its inputs go."""

    decodes_in_groups: bool
    config: Any
    device: torch.device

    def layout(self) -> TokenLayout:
        """The layout of one generated sample (its grid)."""

    def start(self, condition: Any, orders: torch.Tensor, *, guided: bool) -> GroupSession:
        """A session decoding the cells of `orders [B, T]` (raster indices in generation
        order) for the batch of `condition` (both CFG halves when `guided`)."""
