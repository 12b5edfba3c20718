"""The delay pattern of multi-codebook audio decoders (MusicGen, Dia).

A step of such a decoder holds one token of each of K codebooks, and codebook k runs `d_k`
steps behind: step t holds frame `t - d_k` of codebook k. MusicGen delays codebook k by k
steps (`delays=K` below); Dia by `config.delay_pattern` (`[0, 8, 9, ..., 15]`). Before its
first frame a codebook holds a fixed id (MusicGen's pad, Dia's BOS), and, for a decoder
whose length is fixed in advance (MusicGen's), after its last frame the pad id.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def codebook_delays(delays: int | Sequence[int]) -> torch.Tensor:
    """Long `[K]`: each codebook's delay in steps; an int K stands for MusicGen's `0 .. K-1`."""
    if isinstance(delays, int) and not isinstance(delays, bool):
        if delays < 1:
            raise ValueError(f"a delay pattern needs at least one codebook, got {delays}")
        return torch.arange(delays)
    d = torch.as_tensor(list(delays), dtype=torch.long)
    if d.dim() != 1 or not len(d) or bool((d < 0).any()):
        raise ValueError(f"delays must be a non-empty list of whole numbers >= 0, got {list(delays)!r}")
    return d


def delay_pattern(steps: int, delays: int | Sequence[int], pad_id: int, *, start_id: int | None = None,
                  pad_end: bool = True) -> torch.Tensor:
    """Long `[steps, K]`: the id the delay pattern forces at each generated step and
    codebook, -1 where the codebook holds a frame.

    Step t of codebook k holds `start_id` (default `pad_id`) before the codebook's first
    frame (`t < d_k`) and, with `pad_end`, `pad_id` after its last one (`t >= steps - D +
    d_k`, D the largest delay: every codebook then holds `steps - D` frames).

    Example:
        >>> delay_pattern(4, 2, 9)  # MusicGen, 2 codebooks
        tensor([[-1,  9],
                [-1, -1],
                [-1, -1],
                [ 9, -1]])
    """
    d = codebook_delays(delays)
    t = torch.arange(steps)[:, None]
    before = t < d
    after = (t >= steps - d.max() + d) if pad_end else torch.zeros_like(before)
    start = pad_id if start_id is None else start_id
    return torch.where(before, start, torch.where(after, pad_id, -1))


def undelay(tokens: torch.Tensor, delays: int | Sequence[int], frames: int | None = None) -> torch.Tensor:
    """Decoded steps `[B, T, K]` -> codec codes `[B, K, F]`: frame f of codebook k is step
    `f + d_k`. `frames` F defaults to `T - D`, every frame all codebooks reach."""
    d = codebook_delays(delays).tolist()
    F = tokens.shape[1] - max(d) if frames is None else frames
    return torch.stack([tokens[:, dk : dk + F, k] for k, dk in enumerate(d)], 1)
