"""Keyed noise: every random number of a decode is a pure function of coordinates.

The caller's `torch.Generator` is read once per call, for one 64-bit key per batch row.
After that, the uniform of (key, stream, position, codebook, attempt, index) is computed
on the fly by Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
SC 2011), the counter-based generator that Triton's `tl.randint4x` also implements. Nothing
depends on how many numbers were drawn before, so no choice of window, branch, draft, batch
mate or thread count moves a row's noise, and a GPU and a CPU give the same bits.

Counter words: c0 the index within a slot (token // 2 for Gumbel noise, the trial for
uniforms), c1 the position, c2 `stream << 16 | codebook`, c3 the attempt (how many times
the position was verified before: SJD and MC-SJD test a position again with a fresh
uniform). Each counter gives four 32-bit words; two words make one 53-bit uniform in
[0, 1), at the resolution of `torch.rand(dtype=torch.float64)`. Gumbel noise of token v uses
the words (0, 1) of counter v // 2 when v is even, (2, 3) when odd.

Tokens are drawn by Gumbel-max, `argmax(scores + g)`, where the scores are the transformed
logits (`mmspec.core.sampling.transformed_scores`) and g the position's Gumbel noise: the
token at a position is then a function of the key and the distribution there alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

MASK32 = 0xFFFFFFFF
PHILOX_ROUND_A, PHILOX_ROUND_B = 0xD2511F53, 0xCD9E8D57  # the round multipliers
PHILOX_KEY_A, PHILOX_KEY_B = 0x9E3779B9, 0xBB67AE85  # the key schedule (Weyl sequence)
PHILOX_ROUNDS = 10
STREAMS = {"gumbel": 0, "verify": 1, "draft": 2, "residual": 3, "order": 4, "head": 5}
TWO_POW_26, TWO_POW_53 = float(2**26), float(2**53)
TILE = 32  # positions per Philox pass of `Noise.remember`
COLUMN_SLOTS = 256  # positions whose allowed columns' noise `Noise.gumbel_columns` keeps, per row


def _mul_hi_lo(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32-bit words of `a * b` for a 32-bit constant `a` and int64 tensors of
    32-bit values `b`. The 64-bit product wraps in int64 two's complement (as torch's integer
    multiply does on every device), which keeps all 64 bits of it (tested against Python's
    integers)."""
    product = a * b
    return (product >> 32) & MASK32, product & MASK32


def philox4x32(c0, c1, c2, c3, k0, k1, rounds: int = PHILOX_ROUNDS) -> tuple[torch.Tensor, ...]:
    """Philox4x32 on int64 tensors holding 32-bit words (broadcast together): four words out."""
    for i in range(rounds):
        if i:
            k0, k1 = (k0 + PHILOX_KEY_A) & MASK32, (k1 + PHILOX_KEY_B) & MASK32
        hi_b, lo_b = _mul_hi_lo(PHILOX_ROUND_B, c2)
        hi_a, lo_a = _mul_hi_lo(PHILOX_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
    return c0, c1, c2, c3


def words_to_uniform(high: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    """float64 uniform in [0, 1) from two 32-bit words: 27 bits of the first, 26 of the second."""
    return ((high >> 5).double() * TWO_POW_26 + (low >> 6).double()) / TWO_POW_53


def gumbel_from_uniform(u: torch.Tensor) -> torch.Tensor:
    """-log(-log u): u = 0 gives -inf (that token cannot win), never NaN."""
    return -torch.log(-torch.log(u))


def draw_keys(generator: torch.Generator | Sequence[torch.Generator] | None, batch_size: int) -> torch.Tensor:
    """Long `[B, 2]`: each row's key, two 32-bit words drawn from the caller's generator
    (row i from generator i when given a list)."""
    if isinstance(generator, (list, tuple)):
        if len(generator) != batch_size:
            raise ValueError(f"got {len(generator)} generators for a batch of {batch_size} rows; give one per row or a single one")
        return torch.cat([draw_keys(g, 1) for g in generator])
    device = generator.device if generator is not None else torch.device("cpu")
    return torch.randint(0, 2**32, (batch_size, 2), generator=generator, dtype=torch.long, device=device).cpu()


class Noise:
    """The keyed noise of one decoding call: a key per batch row, and the noise of any
    coordinates computed on demand (never an [L, V] table).

    Example:
        >>> noise = Noise.from_generator(torch.Generator().manual_seed(0), batch_size=2)
        >>> u = noise.uniform("verify", torch.tensor([1]), torch.tensor([[5, 6]]))
        >>> u.shape, bool(torch.equal(u, noise.uniform("verify", torch.tensor([1]), torch.tensor([[5, 6]]))))
        (torch.Size([1, 2, 1]), True)
    """

    def __init__(self, keys: torch.Tensor, device: torch.device | str | None = None):
        if keys.dim() != 2 or keys.shape[1] != 2 or keys.dtype != torch.long:
            raise ValueError(f"keys must be long [B, 2] (two 32-bit words per row), got {keys.dtype} {tuple(keys.shape)}")
        self.device = torch.device(device) if device is not None else keys.device
        self.keys = (keys & MASK32).to(self.device)
        self._index = {}
        self._store = None  # (tags [B, C], noise [B, C, K, V]): see `remember`
        self._columns = None  # (tags [B, COLUMN_SLOTS], noise [B, COLUMN_SLOTS, K, A]): see `gumbel_columns`

    @classmethod
    def from_generator(cls, generator, batch_size: int, device=None) -> "Noise":
        """Draws each row's key from `generator` (a `torch.Generator`, a list of one per row,
        or None for torch's default generator), once."""
        return cls(draw_keys(generator, batch_size), device)

    @property
    def batch_size(self) -> int:
        return self.keys.shape[0]

    def _words(self, stream: str, rows, positions, codebooks: int, attempt, index) -> tuple[torch.Tensor, ...]:
        """Philox words for rows `[N]`, positions `[N, S]`, K codebooks, attempt (int or
        `[N, S]`) and index (`[I]`, or any shape that broadcasts to `[N, S, K, I]`): four
        tensors `[N, S, K, I]`."""
        rows, positions = rows.to(self.device), positions.to(self.device)
        key = self.keys[rows]  # [N, 2]
        k0, k1 = key[:, 0, None, None, None], key[:, 1, None, None, None]
        c1 = positions[..., None, None].long()
        c2 = (STREAMS[stream] << 16) + torch.arange(codebooks, device=self.device)[:, None]
        c3 = attempt[..., None, None].long().to(self.device) if torch.is_tensor(attempt) else attempt
        return philox4x32(index, c1, c2, c3, k0, k1)

    def uniform(self, stream: str, rows: torch.Tensor, positions: torch.Tensor, codebooks: int = 1, attempt=0,
                count: int | None = None, first: int = 0) -> torch.Tensor:
        """float64 uniforms `[N, S, K]` (or `[N, S, K, count]`, indices `first` onwards) of
        `stream` at `positions [N, S]` of batch rows `rows [N]`, for `attempt` (int or long `[N, S]`)."""
        index = torch.arange(first, first + (1 if count is None else count), device=self.device)
        w0, w1, _, _ = self._words(stream, rows, positions, codebooks, attempt, index)
        u = words_to_uniform(w0, w1)
        return u[..., 0] if count is None else u

    def uniform_pair(self, stream: str, rows: torch.Tensor, positions: torch.Tensor, codebooks: int = 1,
                     attempt=0) -> tuple[torch.Tensor, torch.Tensor]:
        """Two float64 uniforms `[N, S, K]` per coordinate from one Philox pass (words 0-1 and 2-3)."""
        w0, w1, w2, w3 = self._words(stream, rows, positions, codebooks, attempt, torch.zeros(1, dtype=torch.long, device=self.device))
        return words_to_uniform(w0, w1)[..., 0], words_to_uniform(w2, w3)[..., 0]

    def remembers(self, codebooks: int, vocab_size: int) -> bool:
        """Whether the Gumbel noise of recent positions is kept (`remember`) for these shapes."""
        return self._store is not None and self._store[1].shape[3:] == (codebooks, vocab_size)

    def gumbel(self, rows: torch.Tensor, positions: torch.Tensor, codebooks: int, vocab_size: int) -> torch.Tensor:
        """float64 Gumbel noise `[N, S, K, V]` of every token at `positions [N, S]` of `rows [N]`
        (read from the recent positions' store when `remember` was called)."""
        if self.remembers(codebooks, vocab_size):
            return self._remembered(rows, positions)
        return self._gumbel(rows, positions, codebooks, vocab_size)

    def _gumbel(self, rows, positions, codebooks: int, vocab_size: int) -> torch.Tensor:
        pairs = (vocab_size + 1) // 2
        index = self._index.get(pairs)
        if index is None:
            index = self._index[pairs] = torch.arange(pairs, device=self.device)
        w0, w1, w2, w3 = self._words("gumbel", rows, positions, codebooks, 0, index)
        u = torch.stack([words_to_uniform(w0, w1), words_to_uniform(w2, w3)], -1).flatten(-2)[..., :vocab_size]
        return gumbel_from_uniform(u)

    def gumbel_at(self, rows: torch.Tensor, positions: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """float64 Gumbel noise `[N, S, K, J]` of the tokens `[N, S, K, J]` only (the same
        numbers as `gumbel` gives them)."""
        tokens = tokens.to(self.device)
        w0, w1, w2, w3 = self._words("gumbel", rows, positions, tokens.shape[2], 0, tokens // 2)
        odd = (tokens % 2).bool()
        return gumbel_from_uniform(words_to_uniform(torch.where(odd, w2, w0), torch.where(odd, w3, w1)))

    def gumbel_columns(self, rows: torch.Tensor, positions: torch.Tensor, tokens: torch.Tensor,
                       max_bytes: int = 2**28) -> torch.Tensor:
        """`gumbel_at` of `tokens [N, S, K, A]` (-1 = padding, given noise that no score
        uses), kept per (row, position) for `COLUMN_SLOTS` recent positions: a window
        verifies a position at several forwards, and its tokens are a function of the
        position (the layout's allowed columns, `keyed_scores`)."""
        N, S, K, A = tokens.shape
        tokens = tokens.clamp(min=0)
        store = self._columns
        if store is None or store[1].shape[2] != K or store[1].shape[3] < A:
            if self.batch_size * COLUMN_SLOTS * K * A * 8 > max_bytes:
                return self.gumbel_at(rows, positions, tokens)
            store = self._columns = (torch.full((self.batch_size, COLUMN_SLOTS), -1, dtype=torch.long, device=self.device),
                                     torch.empty(self.batch_size, COLUMN_SLOTS, K, A, dtype=torch.float64, device=self.device))
        tags, values = store
        r = rows.to(self.device)[:, None].expand_as(positions)
        place = positions % COLUMN_SLOTS
        miss = tags[r, place] != positions
        if bool(miss.any()):
            fresh = self.gumbel_at(r[miss], positions[miss][:, None], tokens[miss][:, None])[:, 0]  # [M, K, A]
            values[r[miss], place[miss], :, :A] = fresh
            tags[r[miss], place[miss]] = positions[miss]
            clash = tags[r, place] != positions  # two positions of this call in one place: computed afresh
            if bool(clash.any()):
                out = values[r, place, :, :A]
                out[clash] = self.gumbel_at(r[clash], positions[clash][:, None], tokens[clash][:, None])[:, 0]
                return out
        return values[r, place, :, :A]

    def remember(self, windows_per_row: int, codebooks: int, vocab_size: int, max_bytes: int = 2**28) -> None:
        """Keeps the Gumbel noise of recent positions, made a tile of `TILE` positions at a
        time: a Jacobi window feeds a position at several forwards, and one Philox pass over
        a tile costs about what a pass over one position does on a CPU (the cost is the
        number of tensor operations). Room for two tiles per window and row; skipped when
        that would exceed `max_bytes`."""
        tiles = 2 * windows_per_row + 2
        if self.batch_size * tiles * TILE * codebooks * vocab_size * 8 <= max_bytes:
            tags = torch.full((self.batch_size, tiles), -1, dtype=torch.long, device=self.device)
            values = torch.empty(self.batch_size, tiles, TILE, codebooks, vocab_size, dtype=torch.float64, device=self.device)
            self._store = (tags, values)

    def _remembered(self, rows, positions) -> torch.Tensor:
        tags, values = self._store
        tile, offset = positions // TILE, positions % TILE
        place = tile % tags.shape[1]
        r = rows[:, None]
        hit = tags[r, place] == tile
        if not bool(hit.all()):
            r = r.expand_as(positions)
            pairs = torch.unique(r[~hit] * (tile.max() + 1) + tile[~hit])
            mr, mt = pairs // (tile.max() + 1), pairs % (tile.max() + 1)
            fresh = self._gumbel(mr, mt[:, None] * TILE + torch.arange(TILE, device=self.device), *values.shape[3:])
            values[mr, mt % tags.shape[1]] = fresh  # two tiles of a call in one place: the check below
            tags[mr, mt % tags.shape[1]] = mt
            hit = tags[r, place] == tile
            if not bool(hit.all()):
                out = values[r, place, offset]
                out[~hit] = self._gumbel(r[~hit], positions[~hit][:, None], *values.shape[3:])[:, 0]
                return out
        return values[r, place, offset]

    def top(self, scores: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, count: int = 1,
            greedy: bool = False, filtered: bool = True, tokens: torch.Tensor | None = None) -> torch.Tensor:
        """Long `[N, S, K, count]`: the tokens of `scores [N, S, K, V]` (transformed logits,
        -inf where out) with the largest perturbed scores, best first; the first is the
        Gumbel-max draw at `positions [N, S]` of `rows [N]`. `greedy`: by the scores alone.
        When few tokens are in (top-k, a small allowed set), noise is made for those only;
        `filtered=False` says none is out (no mask, top-k or top-p), which skips the count.
        `tokens [N, S, K, A]`: the scores are over these token ids only (`keyed_scores`'
        allowed columns; -1 = padding, scored -inf), and the ids are returned."""
        if tokens is not None:
            best = min(count, tokens.shape[-1])
            noisy = scores if greedy else scores.double() + self.gumbel_columns(rows, positions, tokens)
            chosen = tokens.gather(-1, noisy.topk(best, dim=-1).indices)
            return torch.nn.functional.pad(chosen, (0, count - best), value=-1)
        if greedy:
            return scores.topk(count, dim=-1).indices
        V = scores.shape[-1]
        support = int((~torch.isneginf(scores)).sum(-1).max()) if filtered else V
        if support * 4 <= V:
            kept = scores.topk(max(support, count), dim=-1)
            noisy = kept.values.double() + self.gumbel_at(rows, positions, kept.indices)  # -inf stays -inf
            return kept.indices.gather(-1, noisy.topk(count, dim=-1).indices)
        noisy = scores.double() + self.gumbel(rows, positions, scores.shape[2], V)
        return noisy.argmax(-1, keepdim=True) if count == 1 else noisy.topk(count, dim=-1).indices

    def winners(self, scores: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor, greedy: bool = False) -> torch.Tensor:
        """The Gumbel-max tokens `[N, S, K]` of `scores [N, S, K, V]` at `positions [N, S]` of `rows [N]`."""
        return self.top(scores, rows, positions, 1, greedy)[..., 0]


@dataclass
class SlotNoise:
    """The noise of N windows' S slots: their batch rows `[N]`, positions `[N, S]` and
    attempts `[N, S]` (times each position was verified before), for SJD and MC-SJD."""

    noise: Noise
    rows: torch.Tensor
    positions: torch.Tensor
    attempt: torch.Tensor

    def test_uniforms(self, codebooks: int) -> tuple[torch.Tensor, torch.Tensor]:
        """float64 `[N, S, K]` twice: each slot's accept and resample uniforms, one Philox pass."""
        return self.noise.uniform_pair("verify", self.rows, self.positions, codebooks, self.attempt)

    def trials(self, where: torch.Tensor, codebooks: int, count: int, first: int) -> torch.Tensor:
        """float64 `[M, codebooks, count]`: the residual trials `first ..` of the M slots `where [N, S]`."""
        rows = self.rows[:, None].expand_as(self.positions)[where]
        return self.noise.uniform("residual", rows, self.positions[where][:, None], codebooks, self.attempt[where][:, None],
                                  count, first)[:, 0]


def as_noise(source, batch_size: int, device=None) -> Noise:
    """`source` as a call's `Noise`: as given, or keys drawn from a generator (a list of one
    per row, or None for torch's default generator)."""
    if isinstance(source, Noise):
        if source.batch_size != batch_size:
            raise ValueError(f"the noise has keys for {source.batch_size} rows, the batch has {batch_size}")
        return source
    return Noise.from_generator(source, batch_size, device)
