"""Variable length: where each sequence of a batch ends.

A sequence ends at its first stop token (the first token of a step, for steps of K
tokens), once every position before it is committed; positions after it are padding in
the output. An accepted run is cut at a stop token. A finished sequence opens no more
windows, and since every random draw of a call has a shape that does not depend on which
sequences are done, finishing never changes the others' results.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Stopping:
    """Attributes:
    stop_tokens (`torch.Tensor`): long `[n]`, the stop ids (empty: fixed length).
    pad_token_id (`int`): what the output holds after a sequence's end.
    length (`int`): T, the layout's length.
    lengths (`torch.Tensor`): long `[B]`, each sequence's length so far (T until it stops).
    """

    stop_tokens: torch.Tensor
    pad_token_id: int
    length: int
    lengths: torch.Tensor

    @classmethod
    def none(cls, batch_size: int, length: int, device) -> "Stopping":
        return cls.at((), None, batch_size, length, device)

    @classmethod
    def at(cls, stop_tokens, pad_token_id: int | None, batch_size: int, length: int, device) -> "Stopping":
        ids = torch.as_tensor(list(stop_tokens), dtype=torch.long, device=device)
        pad = int(ids[0]) if pad_token_id is None and len(ids) else (-1 if pad_token_id is None else pad_token_id)
        return cls(ids, pad, length, torch.full((batch_size,), length, device=device))

    @property
    def finished(self) -> torch.Tensor:
        """Bool `[B]`: the sequences that have reached their stop token."""
        return self.lengths < self.length

    def is_stop(self, tokens: torch.Tensor) -> torch.Tensor:
        """Bool `[...]` for steps `[..., K]`: the step's first token is a stop id."""
        return torch.isin(tokens[..., 0], self.stop_tokens)

    def cut(self, run_length: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        """Run lengths `[B, R]` of windows' `steps [B, R, S, K]`, cut after a stop token."""
        if not len(self.stop_tokens):
            return run_length
        slot = torch.arange(steps.shape[2], device=steps.device)
        stop = self.is_stop(steps) & (slot < run_length[..., None])
        first = torch.where(stop, slot, steps.shape[2]).amin(-1)
        return torch.minimum(run_length, first + 1)

    def update(self, tokens: torch.Tensor, committed: torch.Tensor) -> None:
        """Ends the sequences whose first stop token has every position before it committed."""
        if not len(self.stop_tokens):
            return
        T = tokens.shape[1]
        pos = torch.arange(T, device=tokens.device)
        first = torch.where(committed & self.is_stop(tokens), pos, T).amin(1)
        prefix = committed.long().cumprod(1).sum(1)  # leading committed positions
        self.lengths = torch.where(first < prefix, first + 1, self.lengths)

    def done(self, committed: torch.Tensor) -> torch.Tensor:
        """Bool `[B, T]`: committed, or after the sequence's end."""
        if not len(self.stop_tokens):  # every sequence runs to the end
            return committed
        return committed | (torch.arange(committed.shape[1], device=committed.device) >= self.lengths[:, None])

    def padded(self, tokens: torch.Tensor) -> torch.Tensor:
        """`tokens [B, T, K]` with the positions after each sequence's end set to the pad id."""
        after = torch.arange(tokens.shape[1], device=tokens.device) >= self.lengths[:, None]
        return tokens.masked_fill(after[..., None], self.pad_token_id)

    def padded_iterations(self, commit_iteration: torch.Tensor) -> torch.Tensor:
        after = torch.arange(commit_iteration.shape[1], device=commit_iteration.device) >= self.lengths[:, None]
        return commit_iteration.masked_fill(after, 0)
