"""Probabilistic Jacobi verification in Triton: the CUDA path of `verify`.

Two launches per call. `_verify_slot_kernel` runs one program per slot (N * S of them): it
turns the slot's logits into p (when given logits), tests the draft under the rule, and
draws both tokens the slot may need, the one at the end of the committed run (from the
residual) and the next draft after it (coupled or fresh). Those are independent per slot;
only the accepted prefix needs the whole window, and `_commit_kernel` (one program per
window) finds it and picks each slot's token.

Every pass over V walks tiles of `BLOCK_V` tokens, so any vocabulary fits:
- softmax: the row max, then the kept mass, then p = exp(x - max) / mass;
- top-k: the k-th largest logit, by bisection on the logits' order-preserving integer keys
  (count of keys >= mid, <= 32 passes); every token tied with it is kept;
- top-p: the smallest key whose mass strictly above it is <= top_p, by the same bisection;
  a token is dropped when the mass of the tokens before it exceeds top_p (LlamaGen's shift);
- GSD's rank window: the w tokens just before d and the w - 1 just after it in the stable
  descending order (p, then id), found one by one with a selection pass each;
- draws: the float64 CDF of the residual, summed tile by tile, inverted at the uniform.

How decisions stay identical to `verify_reference` (the tests compare with torch.equal):
- ratios p(d) / q(d) use round-to-nearest division (`div_rn`), as torch's `/`;
- LANTERN's cumulative neighbour mass is summed in float64 and rounded to float32 per
  prefix, as torch's CPU cumsum of float32 does;
- GSD's embedding distance is summed in float32 in index order, which is torch's CPU order
  for E <= 8 (LlamaGen's codebook has E = 8); group masses are summed in float64 and rounded;
- CDFs are float64 in both, summed in a different order: a draw differs only if u * total
  lies within ~1e-16 (relative) of a CDF step; a zero-mass token is never drawn in either.
What cannot be bit-identical: exp (the softmax of logits) and torch's vectorized float32
sums. p then agrees to ~1e-7 and a decision differs only if its uniform lies that close to
its threshold (about 1e-7 per decision). Ties in p and in logits are handled exactly (top-k
keeps every tied token; GSD breaks them by id); only top-p on tied logits is left to the
order torch.sort happens to give ties, which no implementation can match. "Identical" means
to the reference on CPU: torch on CUDA accumulates float32 cumsums in float32, so the GPU
check (benchmarks/gpu_verify_check.py) compares decisions with the CPU reference.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from mmspec.core.rules import ExactRule, GSDRule, LanternRule
from mmspec.core.sampling import SamplingConfig
from mmspec.kernels.verify_types import VERIFY_DOC, VerifyOutput, check_rule

MAX_BLOCK_V = 2048  # vocabulary tile; tests lower it to cover several tiles with small V
RULE_EXACT, RULE_LANTERN, RULE_GSD = 0, 1, 2
NEG_INF_KEY = tl.constexpr(-2139095041)  # _order_key(-inf): the lowest key of any logit


@triton.jit
def _order_key(x):
    """float32 -> int64 key with the same order (-inf lowest; -0.0 and +0.0 equal)."""
    bits = x.to(tl.int32, bitcast=True)
    key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return tl.where(x == 0.0, 0, key).to(tl.int64)


@triton.jit
def _tempered_logits(logits_row_ptr, allowed_row_ptr, offs, V, temperature, HAS_ALLOWED: tl.constexpr, GREEDY: tl.constexpr):
    """One tile of the masked logits divided by the temperature; -inf past V.  # [BLOCK_V]"""
    in_v = offs < V
    x = tl.load(logits_row_ptr + offs, mask=in_v, other=float("-inf"))
    if HAS_ALLOWED:
        ok = tl.load(allowed_row_ptr + offs, mask=in_v, other=0)
        x = tl.where(ok != 0, x, float("-inf"))
    if not GREEDY:
        x = tl.math.div_rn(x, temperature)  # as torch's `/`, so top-k sees the same values
    return x


@triton.jit
def _kept_mass(logits_row_ptr, allowed_row_ptr, V, temperature, x_max, keep_key,
               HAS_ALLOWED: tl.constexpr, BLOCK_V: tl.constexpr):
    """Sum of exp(x - max) over the tokens whose key is >= keep_key (float32)."""
    z = tl.zeros((), dtype=tl.float32)
    for v0 in range(0, V, BLOCK_V):
        x = _tempered_logits(logits_row_ptr, allowed_row_ptr, v0 + tl.arange(0, BLOCK_V), V, temperature, HAS_ALLOWED, False)
        z += tl.sum(tl.where(_order_key(x) >= keep_key, tl.exp(x - x_max), 0.0), 0)
    return z


@triton.jit
def _top_k_key(logits_row_ptr, allowed_row_ptr, V, temperature, top_k, max_key,
               HAS_ALLOWED: tl.constexpr, BLOCK_V: tl.constexpr):
    """Key of the k-th largest logit: the largest key t with count(key >= t) >= k."""
    lo = tl.full((), NEG_INF_KEY, tl.int64)  # every token counts: k < V
    hi = max_key + 1  # no token counts
    while hi - lo > 1:
        mid = lo + (hi - lo) // 2
        count = tl.zeros((), dtype=tl.int32)
        for v0 in range(0, V, BLOCK_V):
            offs = v0 + tl.arange(0, BLOCK_V)
            x = _tempered_logits(logits_row_ptr, allowed_row_ptr, offs, V, temperature, HAS_ALLOWED, False)
            count += tl.sum(((_order_key(x) >= mid) & (offs < V)).to(tl.int32), 0)
        if count >= top_k:
            lo = mid
        else:
            hi = mid
    return lo


@triton.jit
def _top_p_key(logits_row_ptr, allowed_row_ptr, V, temperature, top_p, x_max, max_key, kept_key,
               HAS_ALLOWED: tl.constexpr, BLOCK_V: tl.constexpr):
    """Smallest key t whose kept mass strictly above t is <= top_p: tokens with key >= t stay."""
    z = _kept_mass(logits_row_ptr, allowed_row_ptr, V, temperature, x_max, kept_key, HAS_ALLOWED, BLOCK_V)
    lo = kept_key - 1  # treated as having mass above > top_p
    hi = max_key  # nothing above the max
    while hi - lo > 1:
        mid = lo + (hi - lo) // 2
        above = tl.zeros((), dtype=tl.float64)
        for v0 in range(0, V, BLOCK_V):
            x = _tempered_logits(logits_row_ptr, allowed_row_ptr, v0 + tl.arange(0, BLOCK_V), V, temperature, HAS_ALLOWED, False)
            key = _order_key(x)
            prob = tl.math.div_rn(tl.exp(x - x_max), z)
            above += tl.sum(tl.where((key > mid) & (key >= kept_key), prob, 0.0).to(tl.float64), 0)
        # float64 sum rounded to float32: torch's CPU cumsum of the sorted float32 probs
        if above.to(tl.float32) <= top_p:
            hi = mid
        else:
            lo = mid
    return hi


@triton.jit
def _max_and_argmax(logits_row_ptr, allowed_row_ptr, V, temperature, HAS_ALLOWED: tl.constexpr, GREEDY: tl.constexpr,
                    BLOCK_V: tl.constexpr):
    """A slot's largest tempered logit and its first index, tile by tile (ties: the earlier
    tile, as torch.argmax)."""
    x_max = tl.full((), float("-inf"), tl.float32)
    arg = tl.zeros((), dtype=tl.int32) + V
    for v0 in range(0, V, BLOCK_V):
        offs = v0 + tl.arange(0, BLOCK_V)
        x = _tempered_logits(logits_row_ptr, allowed_row_ptr, offs, V, temperature, HAS_ALLOWED, GREEDY)
        tile_max = tl.max(x, 0)
        tile_arg = tl.min(tl.where(x == tile_max, offs, V), 0)
        arg = tl.where(tile_max > x_max, tile_arg, arg)
        x_max = tl.maximum(x_max, tile_max)
    return x_max, arg


@triton.jit
def _keep_key(logits_row_ptr, allowed_row_ptr, V, temperature, top_k, top_p, x_max, HAS_ALLOWED: tl.constexpr,
              TOP_K: tl.constexpr, TOP_P: tl.constexpr, BLOCK_V: tl.constexpr):
    """The lowest order key top-k and top-p keep (every token is in at `NEG_INF_KEY`);
    `x_max` is the slot's largest tempered logit."""
    keep_key = tl.full((), NEG_INF_KEY, tl.int64)
    max_key = _order_key(x_max)
    if TOP_K:
        keep_key = _top_k_key(logits_row_ptr, allowed_row_ptr, V, temperature, top_k, max_key, HAS_ALLOWED, BLOCK_V)
    if TOP_P:
        keep_key = _top_p_key(logits_row_ptr, allowed_row_ptr, V, temperature, top_p, x_max, max_key, keep_key,
                              HAS_ALLOWED, BLOCK_V)
    return keep_key


@triton.jit
def _write_target_probs(logits_row_ptr, allowed_row_ptr, p_row_ptr, V, temperature, top_k, top_p,
                        HAS_ALLOWED: tl.constexpr, GREEDY: tl.constexpr, TOP_K: tl.constexpr, TOP_P: tl.constexpr,
                        BLOCK_V: tl.constexpr):
    """p of one slot from its logits: mask, temperature, top-k, top-p, softmax (or one-hot)."""
    # 1. max and first arg-max
    x_max, arg = _max_and_argmax(logits_row_ptr, allowed_row_ptr, V, temperature, HAS_ALLOWED, GREEDY, BLOCK_V)
    if GREEDY:  # top-k and top-p always keep the arg-max
        for v0 in range(0, V, BLOCK_V):
            offs = v0 + tl.arange(0, BLOCK_V)
            tl.store(p_row_ptr + offs, tl.where(offs == arg, 1.0, 0.0), mask=offs < V)
    else:
        # 2. filters: a token stays when its key is >= keep_key
        keep_key = _keep_key(logits_row_ptr, allowed_row_ptr, V, temperature, top_k, top_p, x_max, HAS_ALLOWED, TOP_K, TOP_P,
                             BLOCK_V)
        # 3. softmax over the kept tokens
        z = _kept_mass(logits_row_ptr, allowed_row_ptr, V, temperature, x_max, keep_key, HAS_ALLOWED, BLOCK_V)
        for v0 in range(0, V, BLOCK_V):
            offs = v0 + tl.arange(0, BLOCK_V)
            x = _tempered_logits(logits_row_ptr, allowed_row_ptr, offs, V, temperature, HAS_ALLOWED, False)
            e = tl.where(_order_key(x) >= keep_key, tl.exp(x - x_max), 0.0)
            tl.store(p_row_ptr + offs, tl.math.div_rn(e, z), mask=offs < V)


@triton.jit
def _ratio(mass_p, mass_q, p_d):
    """min(1, mass_p / mass_q), 0 where mass_q or p(d) is 0 (as the rules of core/rules.py)."""
    ratio = tl.math.div_rn(mass_p, tl.maximum(mass_q, 1e-30))
    return tl.minimum(tl.where((mass_q > 0) & (p_d > 0), ratio, 0.0), 1.0)


@triton.jit
def _lantern_boost(p_row_ptr, nbr_row_ptr, p_d, K, bound, LAMBDA_BOUND: tl.constexpr, BLOCK_K: tl.constexpr):
    """max{c_j : c_j <= bound}, c_j the cumulative p of d's j nearest neighbours (0 if none)."""
    if LAMBDA_BOUND:
        bound = bound * p_d  # (lam - 1) * p(d)
    carry = tl.zeros((), dtype=tl.float64)
    boost = tl.zeros((), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        ids = tl.load(nbr_row_ptr + offs, mask=offs < K, other=0)
        p_nbr = tl.load(p_row_ptr + ids, mask=offs < K, other=0.0).to(tl.float64)
        cum = (carry + tl.cumsum(p_nbr, 0)).to(tl.float32)  # [BLOCK_K]
        carry += tl.sum(p_nbr, 0)
        boost = tl.maximum(boost, tl.max(tl.where((offs < K) & (cum <= bound), cum, 0.0), 0))
    return boost


@triton.jit
def _gsd_member(p_row_ptr, q_row_ptr, emb_ptr, g, d, p_d, E, prob_gap, embed_dist, NO_DRAFT_PROBS: tl.constexpr):
    """(p(g), q(g)) as float64 when g belongs to d's group, else (0, 0)."""
    p_g = tl.load(p_row_ptr + g)
    if NO_DRAFT_PROBS:
        q_g = tl.where(g == d, 1.0, 0.0)
    else:
        q_g = tl.load(q_row_ptr + g)
    dist = tl.zeros((), dtype=tl.float32)
    for e in range(0, E):  # float32 in index order: torch's CPU sum order for E <= 8
        diff = tl.load(emb_ptr + g * E + e) - tl.load(emb_ptr + d * E + e)
        dist += diff * diff
    member = (tl.abs(p_g - p_d) < prob_gap) & (dist < embed_dist)
    return tl.where(member, p_g, 0.0).to(tl.float64), tl.where(member, q_g, 0.0).to(tl.float64)


@triton.jit
def _rank_neighbour(p_row_ptr, cur_p, cur_id, V, BEFORE: tl.constexpr, BLOCK_V: tl.constexpr):
    """The token just before (BEFORE) or just after `cur_id` in the order (p descending, id
    ascending); -1 when there is none. Returns (id, p)."""
    if BEFORE:
        best_p = tl.full((), float("inf"), tl.float32)
        best_id = tl.full((), -1, tl.int32)
    else:
        best_p = tl.full((), -1.0, tl.float32)
        best_id = tl.zeros((), dtype=tl.int32) + V
    for v0 in range(0, V, BLOCK_V):
        offs = v0 + tl.arange(0, BLOCK_V)
        p = tl.load(p_row_ptr + offs, mask=offs < V, other=0.0)
        if BEFORE:  # the last token of those ranked before: lowest p, then highest id
            cand = (offs < V) & ((p > cur_p) | ((p == cur_p) & (offs < cur_id)))
            tile_p = tl.min(tl.where(cand, p, float("inf")), 0)
            tile_id = tl.max(tl.where(cand & (p == tile_p), offs, -1), 0)
            better = (tile_p < best_p) | ((tile_p == best_p) & (tile_id > best_id))
        else:  # the first token of those ranked after: highest p, then lowest id
            cand = (offs < V) & ((p < cur_p) | ((p == cur_p) & (offs > cur_id)))
            tile_p = tl.max(tl.where(cand, p, -1.0), 0)
            tile_id = tl.min(tl.where(cand & (p == tile_p), offs, V), 0)
            better = (tile_p > best_p) | ((tile_p == best_p) & (tile_id < best_id))
        best_p = tl.where(better, tile_p, best_p)
        best_id = tl.where(better, tile_id, best_id)
    return tl.where((best_id >= 0) & (best_id < V), best_id, -1).to(tl.int64), best_p


@triton.jit
def _gsd_masses(p_row_ptr, q_row_ptr, emb_ptr, d, p_d, V, E, W, prob_gap, embed_dist,
                NO_DRAFT_PROBS: tl.constexpr, BLOCK_V: tl.constexpr):
    """(p(G), q(G)) in float32 for the group of d: ranks [r - W, r + W) filtered."""
    p_g, q_g = _gsd_member(p_row_ptr, q_row_ptr, emb_ptr, d, d, p_d, E, prob_gap, embed_dist, NO_DRAFT_PROBS)
    cur_id = d
    cur_p = p_d
    for _ in range(0, W):  # ranks r - 1 down to r - W
        if cur_id >= 0:
            cur_id, cur_p = _rank_neighbour(p_row_ptr, cur_p, cur_id, V, True, BLOCK_V)
            if cur_id >= 0:
                dp, dq = _gsd_member(p_row_ptr, q_row_ptr, emb_ptr, cur_id, d, p_d, E, prob_gap, embed_dist, NO_DRAFT_PROBS)
                p_g += dp
                q_g += dq
    cur_id = d
    cur_p = p_d
    for _ in range(0, W - 1):  # ranks r + 1 up to r + W - 1
        if cur_id >= 0:
            cur_id, cur_p = _rank_neighbour(p_row_ptr, cur_p, cur_id, V, False, BLOCK_V)
            if cur_id >= 0:
                dp, dq = _gsd_member(p_row_ptr, q_row_ptr, emb_ptr, cur_id, d, p_d, E, prob_gap, embed_dist, NO_DRAFT_PROBS)
                p_g += dp
                q_g += dq
    return p_g.to(tl.float32), q_g.to(tl.float32)


@triton.jit
def _residual_tile(p_row_ptr, q_row_ptr, offs, d, q_scale, V, NO_DRAFT_PROBS: tl.constexpr):
    """max(p - q_scale * q, 0) on one tile (q_scale 0: p itself).  # [BLOCK_V]"""
    p = tl.load(p_row_ptr + offs, mask=offs < V, other=0.0)
    if NO_DRAFT_PROBS:
        q = tl.where(offs == d, 1.0, 0.0)
    else:
        q = tl.load(q_row_ptr + offs, mask=offs < V, other=0.0)
    return tl.maximum(p - q * q_scale, 0.0)


@triton.jit
def _residual_mass(p_row_ptr, q_row_ptr, d, q_scale, V, NO_DRAFT_PROBS: tl.constexpr, BLOCK_V: tl.constexpr):
    total = tl.zeros((), dtype=tl.float64)
    for v0 in range(0, V, BLOCK_V):
        r = _residual_tile(p_row_ptr, q_row_ptr, v0 + tl.arange(0, BLOCK_V), d, q_scale, V, NO_DRAFT_PROBS)
        total += tl.sum(r.to(tl.float64), 0)
    return total


@triton.jit
def _draw(p_row_ptr, q_row_ptr, d, q_scale, u, V, NO_DRAFT_PROBS: tl.constexpr, BLOCK_V: tl.constexpr):
    """A token from max(p - q_scale * q, 0), falling back to p when that has no mass, by
    inverting the float64 CDF at u as `mmspec.core.sampling.categorical`."""
    total = _residual_mass(p_row_ptr, q_row_ptr, d, q_scale, V, NO_DRAFT_PROBS, BLOCK_V)
    if total == 0:  # p == q up to rounding: rejection had probability ~0
        q_scale = q_scale * 0.0
        total = _residual_mass(p_row_ptr, q_row_ptr, d, q_scale, V, NO_DRAFT_PROBS, BLOCK_V)
    target = u * total
    carry = tl.zeros((), dtype=tl.float64)
    first = tl.zeros((), dtype=tl.int32) + V  # first token with mass whose CDF exceeds the target
    last = tl.full((), -1, tl.int32)  # last token with mass: u * total can round up to total
    for v0 in range(0, V, BLOCK_V):
        offs = v0 + tl.arange(0, BLOCK_V)
        r = _residual_tile(p_row_ptr, q_row_ptr, offs, d, q_scale, V, NO_DRAFT_PROBS)
        cdf = carry + tl.cumsum(r.to(tl.float64), 0)  # [BLOCK_V]
        carry += tl.sum(r.to(tl.float64), 0)
        first = tl.minimum(first, tl.min(tl.where((cdf > target) & (r > 0), offs, V), 0))
        last = tl.maximum(last, tl.max(tl.where(r > 0, offs, -1), 0))
    return tl.minimum(first, last)


@triton.jit
def _verify_slot_kernel(
    p_ptr,  # [N, S, V] float32: read (target_probs) or written (FROM_LOGITS)
    logits_ptr,  # [N, S, V] float32 (FROM_LOGITS)
    allowed_ptr,  # [N, S, V] uint8 (HAS_ALLOWED)
    q_ptr,  # [N, S, V] float32 (unless NO_DRAFT_PROBS)
    draft_ptr,  # [N, S] int64, -1 = no draft
    num_slots_ptr,  # [N] int64
    accept_u_ptr,  # [N, S] float64
    sample_u_ptr,  # [N, S] float64
    accept_ptr,  # [N, S] int8 out: draft accepted under the rule
    drawn_ptr,  # [N, S] int64 out: the token if the run ends here
    later_ptr,  # [N, S] int64 out: the next draft if the run ends before
    nbr_ptr,  # [V, K] int64 (LANTERN)
    emb_ptr,  # [V, E] float32 (GSD)
    S, V, K, E, W,
    temperature, top_k, top_p, lantern_bound, prob_gap, embed_dist,
    FROM_LOGITS: tl.constexpr, HAS_ALLOWED: tl.constexpr, GREEDY: tl.constexpr, TOP_K: tl.constexpr,
    TOP_P: tl.constexpr, NO_DRAFT_PROBS: tl.constexpr, RULE: tl.constexpr, LAMBDA_BOUND: tl.constexpr,
    COUPLING: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
):
    slot = tl.program_id(0)  # n * S + s
    row = slot.to(tl.int64) * V
    p_row_ptr = p_ptr + row
    q_row_ptr = q_ptr + row
    if FROM_LOGITS:
        _write_target_probs(logits_ptr + row, allowed_ptr + row, p_row_ptr, V, temperature, top_k, top_p,
                            HAS_ALLOWED, GREEDY, TOP_K, TOP_P, BLOCK_V)
        tl.debug_barrier()  # the row's p, written by every thread, is read back below
    if slot % S < tl.load(num_slots_ptr + slot // S):
        d = tl.load(draft_ptr + slot)
        has_draft = d >= 0
        d = tl.maximum(d, 0)
        p_d = tl.load(p_row_ptr + d)
        if NO_DRAFT_PROBS:
            q_d = tl.where(has_draft, 1.0, 0.0)
        else:
            q_d = tl.where(has_draft, tl.load(q_row_ptr + d), 0.0)
        u_accept = tl.load(accept_u_ptr + slot)
        u_sample = tl.load(sample_u_ptr + slot)
        exact = _ratio(p_d, q_d, p_d)  # min(1, p(d) / q(d))
        if RULE == 1:  # RULE_LANTERN
            boost = _lantern_boost(p_row_ptr, nbr_ptr + d * K, p_d, K, lantern_bound, LAMBDA_BOUND, BLOCK_K)
            ratio = _ratio(p_d + boost, q_d, p_d)
        elif RULE == 2:  # RULE_GSD
            p_group, q_group = _gsd_masses(p_row_ptr, q_row_ptr, emb_ptr, d, p_d, V, E, W, prob_gap, embed_dist,
                                           NO_DRAFT_PROBS, BLOCK_V)
            ratio = _ratio(p_group, q_group, p_d)
        else:
            ratio = exact
        accept = has_draft & (u_accept < ratio.to(tl.float64))
        q_scale = tl.where(has_draft, 1.0, 0.0)  # no draft: q = 0, the residual is p
        drawn = _draw(p_row_ptr, q_row_ptr, d, q_scale, u_sample, V, NO_DRAFT_PROBS, BLOCK_V)
        if COUPLING:  # keep d with probability min(1, p(d) / q(d)), else the residual draw
            later = tl.where(has_draft & (u_accept < exact.to(tl.float64)), d, drawn)
        else:  # a fresh sample from p (the residual draw already is one without a draft)
            later = drawn
            if has_draft:  # q_scale 0 draws from p (passed as a tensor: _draw may reassign it)
                later = _draw(p_row_ptr, q_row_ptr, d, q_scale * 0.0, u_sample, V, NO_DRAFT_PROBS, BLOCK_V)
        tl.store(accept_ptr + slot, accept.to(tl.int8))
        tl.store(drawn_ptr + slot, drawn.to(tl.int64))
        tl.store(later_ptr + slot, later.to(tl.int64))


@triton.jit
def _commit_kernel(
    accept_ptr,  # [N, S] int8
    drawn_ptr,  # [N, S] int64
    later_ptr,  # [N, S] int64
    draft_ptr,  # [N, S] int64
    num_slots_ptr,  # [N] int64
    accepted_ptr,  # [N] int64 out
    run_length_ptr,  # [N] int64 out
    tokens_ptr,  # [N, S] int64 out
    S,
    BLOCK_S: tl.constexpr,
):
    n = tl.program_id(0)
    s = tl.arange(0, BLOCK_S)
    row = n.to(tl.int64) * S + s
    n_slots = tl.load(num_slots_ptr + n)
    has_p = (s < S) & (s < n_slots)
    accept = tl.load(accept_ptr + row, mask=has_p, other=0)
    accepted = tl.min(tl.where((s < S) & (accept == 0), s, S), 0).to(tl.int64)  # first slot not accepted
    draft = tl.load(draft_ptr + row, mask=s < S, other=-1)
    drawn = tl.load(drawn_ptr + row, mask=has_p, other=-1)
    later = tl.load(later_ptr + row, mask=has_p, other=-1)
    tokens = tl.where(s < accepted, draft, tl.where(s == accepted, drawn, later))
    tl.store(tokens_ptr + row, tl.where(has_p, tokens, draft), mask=s < S)
    tl.store(accepted_ptr + n, accepted)
    tl.store(run_length_ptr + n, accepted + (accepted < n_slots).to(tl.int64))


def check_contiguous(**tensors: torch.Tensor | None) -> None:
    for name, t in tensors.items():
        if t is not None and not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous for the Triton kernel (strides {t.stride()}); pass {name}.contiguous()")


def rule_arguments(rule, V: int, device: torch.device, dummy: torch.Tensor) -> dict:
    """The kernel's rule arguments: tables, sizes, thresholds and compile-time flags."""
    args = dict(nbr_ptr=dummy, emb_ptr=dummy, K=1, E=1, W=1, lantern_bound=0.0, prob_gap=0.0, embed_dist=0.0,
                RULE=RULE_EXACT, LAMBDA_BOUND=False, BLOCK_K=16)
    if isinstance(rule, ExactRule):
        return args
    check_rule(rule, V)
    if isinstance(rule, LanternRule):
        neighbours = rule.neighbours.to(device)  # [V, K]
        check_contiguous(neighbours=neighbours)
        lambda_bound = rule.lam is not None
        args.update(nbr_ptr=neighbours, K=neighbours.shape[1], RULE=RULE_LANTERN, LAMBDA_BOUND=lambda_bound,
                    lantern_bound=rule.lam - 1 if lambda_bound else rule.delta,
                    BLOCK_K=min(1024, triton.next_power_of_2(neighbours.shape[1])))
        return args
    if isinstance(rule, GSDRule):
        embeddings = rule.embeddings.to(device)  # [V, E]
        check_contiguous(embeddings=embeddings)
        args.update(emb_ptr=embeddings, E=embeddings.shape[1], W=rule.rank_window, prob_gap=rule.prob_gap,
                    embed_dist=rule.embed_dist, RULE=RULE_GSD)
        return args
    raise ValueError(f"the Triton kernel knows ExactRule, LanternRule and GSDRule, not {type(rule).__name__}")


def verify_triton(
    target_probs: torch.Tensor | None,  # [N, S, V]
    draft_probs: torch.Tensor | None,  # [N, S, V]
    draft_tokens: torch.Tensor,  # [N, S]
    num_slots: torch.Tensor,  # [N]
    accept_uniforms: torch.Tensor,  # [N, S]
    sample_uniforms: torch.Tensor,  # [N, S]
    *,
    target_logits: torch.Tensor | None = None,  # [N, S, V]
    sampling: SamplingConfig = SamplingConfig(),
    allowed: torch.Tensor | None = None,  # [N, S, V] bool
    rule=ExactRule(),
    coupling: bool = True,
) -> VerifyOutput:
    temperature, top_k, top_p = sampling.temperature, sampling.top_k, sampling.top_p
    check_contiguous(target_probs=target_probs, draft_probs=draft_probs, draft_tokens=draft_tokens, num_slots=num_slots,
                     accept_uniforms=accept_uniforms, sample_uniforms=sample_uniforms, target_logits=target_logits,
                     allowed=allowed)
    from_logits = target_logits is not None
    N, S, V = (target_logits if from_logits else target_probs).shape
    device = draft_tokens.device
    p = torch.empty(N, S, V, dtype=torch.float32, device=device) if from_logits else target_probs
    accept = torch.empty(N, S, dtype=torch.int8, device=device)
    drawn = torch.empty(N, S, dtype=torch.long, device=device)
    later = torch.empty(N, S, dtype=torch.long, device=device)
    block_v = min(MAX_BLOCK_V, triton.next_power_of_2(V))
    _verify_slot_kernel[(N * S,)](
        p, target_logits if from_logits else p, allowed.view(torch.uint8) if allowed is not None else draft_tokens,
        draft_probs if draft_probs is not None else p, draft_tokens, num_slots, accept_uniforms, sample_uniforms,
        accept, drawn, later, S=S, V=V, temperature=temperature, top_k=top_k, top_p=top_p,
        FROM_LOGITS=from_logits, HAS_ALLOWED=allowed is not None, GREEDY=temperature == 0,
        TOP_K=0 < top_k < V, TOP_P=top_p < 1.0, NO_DRAFT_PROBS=draft_probs is None, COUPLING=coupling,
        BLOCK_V=block_v, num_warps=8 if block_v >= 2048 else 4,
        **rule_arguments(rule, V, device, draft_tokens),
    )
    accepted = torch.empty(N, dtype=torch.long, device=device)
    run_length = torch.empty(N, dtype=torch.long, device=device)
    tokens = torch.empty(N, S, dtype=torch.long, device=device)
    _commit_kernel[(N,)](accept, drawn, later, draft_tokens, num_slots, accepted, run_length, tokens, S,
                         BLOCK_S=triton.next_power_of_2(S))
    return VerifyOutput(accepted=accepted, run_length=run_length, tokens=tokens, target_probs=p)


verify_triton.__doc__ = VERIFY_DOC
