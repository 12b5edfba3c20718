"""Keyed verification in Triton: the CUDA path of `verify_keyed`.

One program per (window n, slot s, codebook k) finds the slot's Gumbel winner
argmax_v(score_v + g_v) over the vocabulary, in tiles of `BLOCK_V` tokens, without any
noise tensor in memory: g_v is made in the kernel from the row's key, the slot's position,
the codebook and v, by Philox4x32-10 (`_philox`, 32-bit unsigned words, `tl.umulhi`) on the
counter of `mmspec.core.noise` (c0 = v // 2, c1 = position, c2 = gumbel stream << 16 | k,
c3 = 0; words (0, 1) for even v, (2, 3) for odd), turned into a 53-bit float64 uniform u and
g = -log(-log u). The scores are the transform of `verify_triton` (reused, not copied):
allowed mask, temperature (round-to-nearest division), top-k (bisection on order-preserving
keys, ties at the k-th kept), top-p (same bisection, LlamaGen's shift by one). The running
maximum of score + g is float64, and ties go to the lowest token id, as torch.argmax.
Temperature 0 takes the arg-max of the masked logits (top-k and top-p keep it), no noise.
Tiles where no token is in (masked out or filtered) make no noise at all. The [N, S] result
is then reduced with a few torch operations (the same as the reference): accepted prefix,
run length, and the winners as tokens where a slot has a p.

How close to `verify_keyed_reference` this is:
- Philox words and uniforms: bit for bit (integer arithmetic and exact float64 scaling; the
  tests check them against `mmspec.core.noise.philox4x32`, with Random123's known answer);
- score + g: the scores are float32 and the sum float64, exact in both; the masked and
  tempered logits and top-k are bit-identical by construction, top-p agrees except where a
  float32 rounding of the kept mass sits on top_p (as in `verify_triton`);
- g itself: float64 log is libdevice's on the GPU, numpy's in the interpreter, Sleef's or
  libm's in torch on CPU; each is within an ulp, not always the same ulp. A winner can thus
  differ only when two perturbed scores lie within ~1e-16 (relative) of each other;
- ties in the scores at temperature 0 go to the lowest id here; the reference takes
  torch.topk's choice, which is the same on CPU for one value but not promised.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from mmspec.core.noise import (
    PHILOX_KEY_A,
    PHILOX_KEY_B,
    PHILOX_ROUND_A,
    PHILOX_ROUND_B,
    PHILOX_ROUNDS,
    STREAMS,
)
from mmspec.core.sampling import SamplingConfig
from mmspec.kernels.verify_triton import (
    NEG_INF_KEY,
    _keep_key,
    _max_and_argmax,
    _order_key,
    _tempered_logits,
    check_contiguous,
)
from mmspec.kernels.verify_types import VerifyOutput

MAX_BLOCK_V = 2048  # vocabulary tile; tests lower it to cover several tiles with small V
ROUND_A, ROUND_B = tl.constexpr(PHILOX_ROUND_A), tl.constexpr(PHILOX_ROUND_B)
KEY_A, KEY_B = tl.constexpr(PHILOX_KEY_A), tl.constexpr(PHILOX_KEY_B)
ROUNDS = tl.constexpr(PHILOX_ROUNDS)
GUMBEL_C2 = STREAMS["gumbel"] << 16  # c2 of codebook k is GUMBEL_C2 + k


@triton.jit
def _philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on uint32 words (tensors or scalars, broadcast): four uint32 words."""
    a = tl.full((), ROUND_A, tl.uint32)
    b = tl.full((), ROUND_B, tl.uint32)
    for i in tl.static_range(ROUNDS):
        if i > 0:  # the key schedule: a Weyl sequence, bumped before every round but the first
            k0 = k0 + tl.full((), KEY_A, tl.uint32)
            k1 = k1 + tl.full((), KEY_B, tl.uint32)
        hi_b = tl.umulhi(c2, b)
        lo_b = c2 * b  # uint32 multiply: the low word of the product
        hi_a = tl.umulhi(c0, a)
        lo_a = c0 * a
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
    return c0, c1, c2, c3


@triton.jit
def _uniform(high, low):
    """float64 uniform in [0, 1) from two uint32 words, as `words_to_uniform`: exact."""
    return ((high >> 5).to(tl.float64) * 67108864.0 + (low >> 6).to(tl.float64)) * (1.0 / 9007199254740992.0)


@triton.jit
def _gumbel(u):
    """-log(-log u) in float64: u = 0 gives -inf, never NaN."""
    return -tl.log(-tl.log(u))


@triton.jit
def _token_gumbel(offs, position, codebook_c2, k0, k1):
    """float64 Gumbel noise of the tokens `offs` (int32) at one position and codebook."""
    c0 = (offs >> 1).to(tl.uint32)
    w0, w1, w2, w3 = _philox(c0, position, codebook_c2, tl.zeros((), tl.uint32), k0, k1)
    odd = (offs & 1) != 0
    return _gumbel(_uniform(tl.where(odd, w2, w0), tl.where(odd, w3, w1)))


@triton.jit
def _keyed_winner_kernel(
    logits_ptr,  # [N, S, K, V] float32
    allowed_ptr,  # [N, S, K, V] uint8 (HAS_ALLOWED)
    keys_ptr,  # [N, 2] int64: each window's key words (32-bit values)
    positions_ptr,  # [N, S] int64
    winners_ptr,  # [N, S, K] int64 out
    S, K, V, codebook_c2,
    temperature, top_k, top_p,
    HAS_ALLOWED: tl.constexpr, GREEDY: tl.constexpr, TOP_K: tl.constexpr, TOP_P: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    pid = tl.program_id(0)  # (n * S + s) * K + k
    slot = pid // K  # n * S + s
    n = slot // S
    row = pid.to(tl.int64) * V
    logits_row_ptr = logits_ptr + row
    allowed_row_ptr = allowed_ptr + row
    if GREEDY:  # the first arg-max of the masked logits
        _, arg = _max_and_argmax(logits_row_ptr, allowed_row_ptr, V, temperature, HAS_ALLOWED, True, BLOCK_V)
    else:
        # 1. filters: a token is in when its key is >= keep_key
        keep_key = tl.full((), NEG_INF_KEY, tl.int64)
        if TOP_K or TOP_P:
            x_max, _ = _max_and_argmax(logits_row_ptr, allowed_row_ptr, V, temperature, HAS_ALLOWED, False, BLOCK_V)
            keep_key = _keep_key(logits_row_ptr, allowed_row_ptr, V, temperature, top_k, top_p, x_max, HAS_ALLOWED, TOP_K,
                                 TOP_P, BLOCK_V)
        # 2. Gumbel-max over the kept tokens, the noise made here from the key
        k0 = tl.load(keys_ptr + 2 * n).to(tl.uint32)
        k1 = tl.load(keys_ptr + 2 * n + 1).to(tl.uint32)
        position = tl.load(positions_ptr + slot).to(tl.uint32)
        c2 = (codebook_c2 + pid % K).to(tl.uint32)
        best = tl.full((), float("-inf"), tl.float64)
        arg = tl.zeros((), dtype=tl.int32) + V
        for v0 in range(0, V, BLOCK_V):
            offs = v0 + tl.arange(0, BLOCK_V)
            x = _tempered_logits(logits_row_ptr, allowed_row_ptr, offs, V, temperature, HAS_ALLOWED, False)
            score = tl.where(_order_key(x) >= keep_key, x, float("-inf"))
            if tl.max(score, 0) > float("-inf"):  # some token of the tile is in
                noisy = score.to(tl.float64) + _token_gumbel(offs, position, c2, k0, k1)  # -inf stays -inf
                tile_max = tl.max(noisy, 0)
                tile_arg = tl.min(tl.where((noisy == tile_max) & (offs < V), offs, V), 0)
                better = (tile_max > best) | (arg == V)  # ties: the earlier tile, as torch.argmax
                arg = tl.where(better, tile_arg, arg)
                best = tl.maximum(best, tile_max)
    tl.store(winners_ptr + pid, tl.where(arg < V, arg, 0).to(tl.int64))  # nothing in: 0, as torch.argmax


@triton.jit
def _philox_kernel(c_ptr, k_ptr, words_ptr, uniforms_ptr, gumbels_ptr, M, BLOCK: tl.constexpr):
    """For tests: Philox words [4, M], uniforms [2, M] (words 0-1 and 2-3) and their Gumbel
    noise [2, M] of counters c [4, M] and keys k [2, M] (int64 holding 32-bit values)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < M
    c0 = tl.load(c_ptr + offs, mask=ok, other=0).to(tl.uint32)
    c1 = tl.load(c_ptr + M + offs, mask=ok, other=0).to(tl.uint32)
    c2 = tl.load(c_ptr + 2 * M + offs, mask=ok, other=0).to(tl.uint32)
    c3 = tl.load(c_ptr + 3 * M + offs, mask=ok, other=0).to(tl.uint32)
    k0 = tl.load(k_ptr + offs, mask=ok, other=0).to(tl.uint32)
    k1 = tl.load(k_ptr + M + offs, mask=ok, other=0).to(tl.uint32)
    w0, w1, w2, w3 = _philox(c0, c1, c2, c3, k0, k1)
    tl.store(words_ptr + offs, w0.to(tl.int64), mask=ok)
    tl.store(words_ptr + M + offs, w1.to(tl.int64), mask=ok)
    tl.store(words_ptr + 2 * M + offs, w2.to(tl.int64), mask=ok)
    tl.store(words_ptr + 3 * M + offs, w3.to(tl.int64), mask=ok)
    u01 = _uniform(w0, w1)
    u23 = _uniform(w2, w3)
    tl.store(uniforms_ptr + offs, u01, mask=ok)
    tl.store(uniforms_ptr + M + offs, u23, mask=ok)
    tl.store(gumbels_ptr + offs, _gumbel(u01), mask=ok)
    tl.store(gumbels_ptr + M + offs, _gumbel(u23), mask=ok)


def philox_uniforms(counters: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The kernel's Philox on `counters` (long `[4, M]`) and `keys` (long `[2, M]`), 32-bit
    values: (words long `[4, M]`, uniforms float64 `[2, M]` of words (0, 1) and (2, 3), their
    Gumbel noise float64 `[2, M]`). For tests against `mmspec.core.noise`."""
    if counters.dim() != 2 or counters.shape[0] != 4 or keys.shape != (2, counters.shape[1]):
        raise ValueError(f"counters must be [4, M] and keys [2, M], got {tuple(counters.shape)} and {tuple(keys.shape)}")
    counters, keys = (counters.long() & 0xFFFFFFFF).contiguous(), (keys.long() & 0xFFFFFFFF).contiguous()
    M = counters.shape[1]
    words = torch.empty(4, M, dtype=torch.long, device=counters.device)
    uniforms = torch.empty(2, M, dtype=torch.float64, device=counters.device)
    gumbels = torch.empty(2, M, dtype=torch.float64, device=counters.device)
    if M:
        block = min(1024, triton.next_power_of_2(M))
        _philox_kernel[(triton.cdiv(M, block),)](counters, keys, words, uniforms, gumbels, M, BLOCK=block)
    return words, uniforms, gumbels


def verify_keyed_triton(
    target_logits: torch.Tensor,  # [N, S, V] or [N, S, K, V] float32, CFG combined
    draft_tokens: torch.Tensor,  # [N, S] or [N, S, K] long, -1 = no draft
    num_slots: torch.Tensor,  # [N] long
    *,
    noise,  # mmspec.core.noise.Noise
    rows: torch.Tensor,  # [N] long: each window's batch row (its key)
    positions: torch.Tensor,  # [N, S] long: the position each slot predicts
    sampling: SamplingConfig = SamplingConfig(),
    allowed: torch.Tensor | None = None,  # like the target, bool
) -> VerifyOutput:
    """`verify_keyed_reference` (ranked = 0) with the winners found by `_keyed_winner_kernel`."""
    check_contiguous(target_logits=target_logits, allowed=allowed)
    one_token = draft_tokens.dim() == 2
    logits = target_logits[:, :, None] if one_token else target_logits
    drafts = draft_tokens[..., None] if one_token else draft_tokens
    N, S, K, V = logits.shape
    device = logits.device
    keys = noise.keys[rows.to(noise.keys.device)].to(device).contiguous()  # [N, 2]
    positions = positions.to(device=device, dtype=torch.long).contiguous()
    winners = torch.empty(N, S, K, dtype=torch.long, device=device)
    if winners.numel():
        block_v = min(MAX_BLOCK_V, triton.next_power_of_2(V))
        temperature = sampling.temperature
        _keyed_winner_kernel[(N * S * K,)](
            logits, allowed.view(torch.uint8) if allowed is not None else logits, keys, positions, winners,
            S, K, V, GUMBEL_C2, temperature, sampling.top_k, sampling.top_p,
            HAS_ALLOWED=allowed is not None, GREEDY=temperature == 0, TOP_K=0 < sampling.top_k < V,
            TOP_P=sampling.top_p < 1.0, BLOCK_V=block_v, num_warps=8 if block_v >= 2048 else 4,
        )
    num_slots = num_slots.to(device)
    has_p = torch.arange(S, device=device)[None, :] < num_slots[:, None]
    match = has_p & (drafts == winners).all(-1)
    accepted = match.long().cumprod(-1).sum(-1)
    run_length = accepted + (accepted < num_slots).long()
    tokens = torch.where(has_p[..., None], winners, drafts)
    return VerifyOutput(accepted=accepted, run_length=run_length, tokens=tokens[..., 0] if one_token else tokens,
                        target_probs=None)
