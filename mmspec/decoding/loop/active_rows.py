"""Finished sequences leave the forward: a call's batch shrinks as its sequences end.

A call runs until its slowest sequence is done, and a finished sequence's rows would
otherwise ride along in every forward after (at 8 rows a 17-input forward costs about 2.5x
a 1-input one on a CPU). The decoding loops keep their state over the whole batch;
`ActiveRows` stands between them and the session: the session holds only the sequences
still decoding (`keep_rows`, where the session offers it), and the loop sees logits over
the whole batch, zeros for the sequences that left (nothing reads them: a finished
sequence has no live window and commits nothing).

Which sequences leave is decided from what was committed before the forward, and every
random draw keeps its whole-batch shape, so no sequence's tokens depend on when the
others end.
"""

from __future__ import annotations

import torch

from mmspec.core.contracts import CallTree, GuidedLogits, TokenSession


class ActiveRows:
    """A `TokenSession` over the whole batch, backed by a session that may drop sequences.

    Attributes:
        rows (`torch.Tensor`, *optional*): long `[B']`, ascending: the sequences the session
            still holds (its row i is sequence `rows[i]`); None while it holds all.
    """

    def __init__(self, session: TokenSession):
        self.session = session
        self.batch_size, self.guided = session.batch_size, session.guided
        self.prompt_tokens = session.prompt_tokens
        self.supports_tree = getattr(session, "supports_tree", False)
        self.shrinks = hasattr(session, "keep_rows")
        self.rows = None
        self.dropped = 0

    def drop(self, done: torch.Tensor, count: int) -> None:
        """Drops the sequences where `done [B]` (bool; `count` of them) from the session's
        forwards, when the session can, some are left to decode, and at least an eighth of
        the rows it holds are done (each drop copies the cache)."""
        held, left = self.held, self.batch_size - count
        if not self.shrinks or not left or (held - left) * 8 < held:
            return
        keep = (~done).nonzero()[:, 0]
        local = keep if self.rows is None else torch.searchsorted(self.rows, keep)
        self.session.keep_rows(local)
        self.rows, self.dropped = keep, self.batch_size - len(keep)

    @property
    def held(self) -> int:
        """Sequences the session's forwards still run."""
        return self.batch_size if self.rows is None else len(self.rows)

    def _take(self, x: torch.Tensor | None) -> torch.Tensor | None:
        return x if x is None or self.rows is None else x[self.rows]

    def _spread(self, x: torch.Tensor | None) -> torch.Tensor | None:
        if x is None or self.rows is None:
            return x
        out = x.new_zeros(self.batch_size, *x.shape[1:])
        out[self.rows] = x
        return out

    def _spread_hidden(self, x: torch.Tensor | None) -> torch.Tensor | None:
        """Hidden states of the held rows (conditional, then unconditional) over the whole batch."""
        if x is None or self.rows is None:
            return x
        halves = x.chunk(2) if self.guided else (x,)
        return torch.cat([self._spread(half) for half in halves])

    def _spread_logits(self, logits: GuidedLogits) -> GuidedLogits:
        return GuidedLogits(self._spread(logits.cond), self._spread(logits.uncond), self._spread_hidden(logits.hidden))

    @property
    def hidden_layers(self):
        return getattr(self.session, "hidden_layers", None)

    @hidden_layers.setter
    def hidden_layers(self, layers) -> None:
        self.session.hidden_layers = layers

    def prefill_logits(self) -> GuidedLogits:
        return self._spread_logits(self.session.prefill_logits())

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, segments: torch.Tensor | None = None,
                tree: CallTree | None = None) -> GuidedLogits:
        take = self._take
        if tree is None:
            logits = self.session.forward(take(tokens), take(positions), take(segments))
        else:
            logits = self.session.forward(take(tokens), take(positions), tree=CallTree(take(tree.acts_as), take(tree.visible)))
        return self._spread_logits(logits)

    def commit(self, positions: torch.Tensor, mask: torch.Tensor) -> None:
        self.session.commit(self._take(positions), self._take(mask))

    def relocate(self, sources: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> None:
        self.session.relocate(self._take(sources), self._take(positions), self._take(mask))
