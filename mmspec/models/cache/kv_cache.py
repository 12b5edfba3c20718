"""A static, index-addressed KV cache with a committed-slot mask.

Slots are written by index (`update`), so a draft costs nothing to discard: it is simply
never marked committed, is never attended, and the next write to its slot overwrites it.
Which slots a query may see is decided here once per forward (`attention_mask`) and
shared by all layers; keys past the last slot a query may see are left out of that
forward (half the cache, on average, of a decode that fills it in order; padding inputs at
scratch slots see the committed slots before that end, and their outputs are never read):

* committed slots strictly before the query's own slot, and
* inputs of the same call in the same segment whose slot is not after the query's.

This differs from LlamaGen's (and gpt-fast's) `tril` mask over the whole buffer, which
lets a query see every slot before it, written or not: harmless for one token at a time,
wrong as soon as positions are opened out of order (ZipAR's published port attends to
undecoded slots that way).
"""

from __future__ import annotations

import torch

from mmspec.core.contracts import GuidedLogits


class StaticKVCache:
    """Keys and values of `n_layers` layers for `rows` sequences and `slots` positions.

    Attributes:
        k, v (`torch.Tensor`): `[n_layers, rows, n_kv_heads, slots, head_dim]`.
        committed (`torch.Tensor`): bool `[rows, slots]`.
    """

    def __init__(self, n_layers: int, rows: int, n_kv_heads: int, slots: int, head_dim: int, *, dtype, device):
        shape = (n_layers, rows, n_kv_heads, slots, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.committed = torch.zeros(rows, slots, dtype=torch.bool, device=device)
        self._row_ids = torch.arange(rows, device=device)[:, None]  # made once: update() runs every layer
        self.key_end = slots  # keys the current forward may attend: the first key_end slots (set by attention_mask)
        self.scratch_start = slots  # slots from here on hold padding inputs and branch nodes (set by the session)

    @property
    def rows(self) -> int:
        return self.k.shape[1]

    @property
    def slots(self) -> int:
        return self.k.shape[3]

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Moves rows `rows [R']` (long, ascending) to the front, in place: the first R'
        rows are then those, and later forwards run on them alone."""
        n = len(rows)
        self.k[:, :n] = self.k[:, rows]
        self.v[:, :n] = self.v[:, rows]
        self.committed[:n] = self.committed[rows]

    def reset(self) -> None:
        """Forgets everything (a reused cache starts empty); the tensors stay allocated."""
        self.committed.zero_()

    def update(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """Writes `k, v [R, H, n, D]` at `slots [R, n]` of the first R rows; returns the
        layer's keys and values `[R, H, key_end, D]`."""
        R = slots.shape[0]
        rows = self._row_ids[:R]  # [R, 1]
        # advanced indices on dims 0 and 2 around a slice: the indexed view is [R, n, H, D]
        self.k[layer, rows, :, slots] = k.transpose(1, 2)
        self.v[layer, rows, :, slots] = v.transpose(1, 2)
        return self.k[layer, :R, :, : self.key_end], self.v[layer, :R, :, : self.key_end]

    def attention_mask(
        self, slots: torch.Tensor, segments: torch.Tensor | None = None, key_valid: torch.Tensor | None = None,
        acts_as: torch.Tensor | None = None, visible: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Bool `[R, 1, n, key_end]`: which slots each of the call's `slots [R, n]` may attend.
        `key_end` is one past the last slot before `scratch_start` that an input writes
        (every slot under tree attention, whose nodes see each other at scratch slots).

        Args:
            segments: long `[R, n]`; inputs see earlier inputs of the same call only within
                their segment (ZipAR rows decoded side by side). Default: one segment.
            key_valid: bool `[R, n]`; inputs that no other input may attend (caption padding
                in a prefix). Each input still attends to itself.
            acts_as, visible: tree attention (`CallTree`): the slot each input stands for
                (long `[R, n]`; it sees committed slots before that one) and which inputs of
                the call it sees (bool `[R, n, n]`), instead of segments.
        """
        R, n = slots.shape
        query = slots if acts_as is None else acts_as
        S = W = self.slots  # keys attended; the mask is built out to the call's own slots (W)
        if visible is None and n:  # one read off the device for both ends
            real_end, own_end = (torch.stack([torch.where(slots < self.scratch_start, slots, 0).max(), slots.max()]) + 1).tolist()
            S, W = real_end, max(real_end, own_end)
        self.key_end = S
        slot_ids = torch.arange(W, device=slots.device)
        mask = self.committed[:R, None, :W] & (slot_ids[None, None, :] < query[:, :, None])  # [R, n, W]
        if visible is not None:
            in_call = visible
        else:
            in_call = slots[:, None, :] <= slots[:, :, None]  # [R, n(query), n(key)]
            if segments is not None:
                in_call &= segments[:, None, :] == segments[:, :, None]
        if key_valid is not None:
            itself = torch.eye(n, dtype=torch.bool, device=slots.device)
            in_call &= key_valid[:, None, :] | itself
        # the call's own slots hold its fresh keys: what they show is decided by in_call alone
        mask.scatter_(2, slots[:, None, :].expand(R, n, n), in_call)
        return mask[:, None, :, :S]

    def relocate(self, sources: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor) -> None:
        """Copies every layer's keys and values at `sources [R, n]` to `slots [R, n]` where `mask`."""
        rows = torch.arange(slots.shape[0], device=slots.device)[:, None].expand_as(slots)[mask]
        src, dst = sources[mask], slots[mask]
        self.k[:, rows, :, dst] = self.k[:, rows, :, src]
        self.v[:, rows, :, dst] = self.v[:, rows, :, src]

    def commit(self, slots: torch.Tensor, mask: torch.Tensor) -> None:
        """Marks `slots [R, n]` committed where `mask [R, n]`."""
        R = slots.shape[0]
        self.committed[:R].scatter_(1, slots, mask | self.committed[:R].gather(1, slots))


class CachedSession:
    """What every TokenSession over a `StaticKVCache` shares: the batch's cache rows
    `[cond; uncond]` under CFG, and the map from generated positions to cache slots (the
    condition prefix takes the first `prefix_len` slots, the `steps` generated positions
    the next ones, and the engine's scratch positions the rest). `row_state` names a
    subclass's tensors with one entry per cache row, which `keep_rows` keeps."""

    row_state: tuple[str, ...] = ()

    def __init__(self, cache: StaticKVCache, prefix_len: int, *, batch_size: int, guided: bool, steps: int):
        self.cache, self.prefix_len = cache, prefix_len
        cache.scratch_start = prefix_len + steps
        self.batch_size, self.guided = batch_size, guided
        self.prompt_tokens = None  # image prompts are features, not tokens a drafter could look up

    def prefill_logits(self) -> GuidedLogits:
        """The logits for position 0, which a subclass computes when it prefills (`_prefill`)."""
        return self._prefill

    @staticmethod
    def check_inputs(tokens: torch.Tensor, positions: torch.Tensor) -> None:
        if tokens.shape != positions.shape:
            raise ValueError(f"tokens {tuple(tokens.shape)} and positions {tuple(positions.shape)} differ in shape")

    def split(self, logits):
        """Logits of all rows -> `GuidedLogits(cond, uncond)`."""
        B = self.batch_size
        return GuidedLogits(logits[:B], logits[B:]) if self.guided else GuidedLogits(logits)

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """A per-sequence tensor repeated for the unconditional rows."""
        return torch.cat([x, x]) if self.guided else x

    def slots(self, positions: torch.Tensor) -> torch.Tensor:
        """Cache slots `[rows, n]` of `positions [B, n]`, checked against the cache size."""
        if positions.dim() != 2 or positions.shape[0] != self.batch_size:
            raise ValueError(f"positions must be [{self.batch_size}, n], got {tuple(positions.shape)}")
        limit = self.cache.slots - self.prefix_len
        if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= limit):
            raise ValueError(
                f"positions must lie in [0, {limit}), got [{int(positions.min())}, {int(positions.max())}]; "
                f"reserve extra_positions at start()"
            )
        return self.rows(positions) + self.prefix_len

    def call_views(self, segments: torch.Tensor | None, tree) -> tuple:
        """A forward's `segments` and `tree` (`CallTree`) in the cache's rows and slots:
        (segments, acts_as, visible), None where not given."""
        segs = None if segments is None else self.rows(segments)
        if tree is None:
            return segs, None, None
        return segs, self.slots(tree.acts_as), self.rows(tree.visible)

    def commit(self, positions: torch.Tensor, mask: torch.Tensor) -> None:
        self.cache.commit(self.slots(positions), self.rows(mask.bool()))

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Keeps the sequences `rows [B']` (long, ascending) of the call and forgets the
        others: positions, tokens and logits are then `[B', ...]`, in that order. The
        engine drops finished sequences so that forwards skip them (`ActiveRows`)."""
        B = self.batch_size
        cache_rows = torch.cat([rows, rows + B]) if self.guided else rows
        self.cache.keep_rows(cache_rows)
        self.batch_size = len(rows)
        self._prefill = GuidedLogits(*(None if x is None else x[rows] for x in (self._prefill.cond, self._prefill.uncond)))
        if self.prompt_tokens is not None:
            self.prompt_tokens = self.prompt_tokens[rows]
        for name in self.row_state:
            setattr(self, name, getattr(self, name)[cache_rows])

    def relocate(self, sources: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> None:
        self.cache.relocate(self.slots(sources), self.slots(positions), self.rows(mask.bool()))
