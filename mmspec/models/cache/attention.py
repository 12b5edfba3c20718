"""The attention of every cached forward, the same for a query whatever else the forward carries.

The keyed methods return AR's tokens only if the logits a forward computes for a position do
not depend on how many inputs that forward carried (one for AR, a window for Jacobi) nor
on how many keys it read (the cache up to the forward's last slot, see `StaticKVCache`).
The linear layers and norms compute each input's row on its own. PyTorch's fused CPU
attention does not in half precision: it splits queries and keys into blocks sized by the
call's lengths, and a sum over other blocks rounds differently to bfloat16 (measured: one
output element in a hundred to a thousand of a 17-query window differs from the same
query's alone); the difference grows through the layers and flips a token at a near-tie.
In float32 the same rounding moves a logit by about 1e-7 and we keep the fused kernel.

So in bfloat16 or float16 on a CPU, attention is computed in float64 from the half-precision
queries, keys and values (converted per layer: a passing copy of four times the layer's cache):

* scores `q @ k^T`: a product of two half-precision numbers is exact in float64, and so is
  the sum of a head's D of them unless their magnitudes span more than about 30 binades;
  the score of a (query, key) pair is then the same whatever the matmul's blocking;
* the softmax: its max is exact in any order, and its sum a sequential `cumsum`, so that
  the masked keys past the query's own that a wider forward reads add exactly 0;
* `probs @ v` in float64, rounded once to the half-precision output: a different order of
  the sum (about 1e-16, relative) changes the rounded output only when that lies within
  1e-16 of a rounding boundary, which no test has met.

It is also more accurate than the fused kernel (no score or probability is rounded to half
precision), and on a CPU without bfloat16 instructions a float64 matmul is faster than a
bfloat16 one. Queries go in chunks that keep the scores under `CHUNK_SCORES` numbers, so a
tree of a thousand branch nodes holds no more than a window does.
`tests/pipelines/test_bfloat16.py` checks the shipped models in bfloat16 (float16 is
computed the same way; its CPU matmuls are not all row by row, and it is not tested).

Our networks call `attention`; a transformers model's SDPA calls are routed to it inside
`invariant_attention(dtype, device)`, a per-thread `TorchFunctionMode` that its session
enters around each forward (a model loaded with the "eager" kernel is left as it is).

Example:
    >>> q = torch.randn(1, 2, 3, 8, dtype=torch.bfloat16); kv = torch.randn(1, 2, 5, 8, dtype=torch.bfloat16)
    >>> attention(q, kv, kv).shape
    torch.Size([1, 2, 3, 8])
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

HALF_DTYPES = (torch.bfloat16, torch.float16)
CHUNK_SCORES = 2**22  # float64 scores held at once (32 MiB; the softmax holds three such tensors)


def needs_invariant_attention(dtype: torch.dtype, device: torch.device | str) -> bool:
    """Whether attention in `dtype` on `device` takes `invariant_attention_forward`
    (half precision on a CPU) instead of PyTorch's fused kernel."""
    return dtype in HALF_DTYPES and torch.device(device).type == "cpu"


def invariant_attention_forward(
    q: torch.Tensor,  # [R, H, n, D]
    k: torch.Tensor,  # [R, H_kv, S, D]
    v: torch.Tensor,  # [R, H_kv, S, D]
    mask: torch.Tensor | None = None,  # [R or 1, 1 or H, n, S]: additive, or bool (True: may attend)
    scale: float | None = None,
    is_causal: bool = False,
) -> torch.Tensor:
    """Softmax attention `[R, H, n, D]` in `q`'s dtype, of `scaled_dot_product_attention`'s
    arguments (grouped heads: query head h reads key head `h // (H // H_kv)`), whose output
    for a query depends only on that query and the keys it may attend (see the module
    docstring). A query that may attend no key gets zeros, as from
    `scaled_dot_product_attention`."""
    R, H, n, D = q.shape
    H_kv, S = k.shape[1], k.shape[2]
    if is_causal:
        mask = torch.ones(n, S, dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        mask = mask.expand(R, H, n, S).reshape(R, H_kv, -1, n, S)
    G = H // H_kv  # query heads per key head: they share one matmul, with no copy of the cache
    q64 = q.double().view(R, H_kv, G, n, D)
    k64, v64 = k.double()[:, :, None], v.double()[:, :, None]  # [R, H_kv, 1, S, D]
    scale = D**-0.5 if scale is None else scale
    step = max(1, CHUNK_SCORES // max(1, R * H * S))
    out = [attend(q64[:, :, :, i:i + step], k64, v64, None if mask is None else mask[:, :, :, i:i + step], scale)
           for i in range(0, n, step)]
    return torch.cat(out, 3).view(R, H, n, D).to(q.dtype)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float) -> torch.Tensor:
    """float64 attention of queries `q [R, H_kv, G, n, D]` over `k, v [R, H_kv, 1, S, D]`,
    `mask [R, H_kv, G, n, S]` (additive or bool) or None."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale  # [R, H_kv, G, n, S]
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask.double()
    top = scores.amax(-1, keepdim=True).clamp_min(torch.finfo(torch.float64).min)  # a row that sees no key: exp(-inf) = 0
    weights = torch.exp(scores - top)
    # cumsum adds in order, so the keys past the query's own (weight 0) leave its total as it
    # was; the total is >= 1 where a key is seen, and the clamp turns a row with none into zeros
    total = weights.cumsum(-1)[..., -1:].clamp_min(1.0)
    return torch.matmul(weights / total, v)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, *,
              enable_gqa: bool = False) -> torch.Tensor:
    """`scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)` as our
    networks call it, in half precision on a CPU `invariant_attention_forward`.

    Args:
        q (`torch.Tensor`): `[R, H, n, D]`.
        k, v (`torch.Tensor`): `[R, H_kv, S, D]`.
        mask (`torch.Tensor`, *optional*): additive or bool `[R or 1, 1, n, S]`; None: causal.
        enable_gqa (`bool`): H is a multiple of H_kv (grouped heads).
    """
    if needs_invariant_attention(q.dtype, q.device):
        return invariant_attention_forward(q, k, v, mask, is_causal=mask is None)
    # grouped heads share their KV head without copies of the cache; asked only when grouped,
    # since enable_gqa rules out some fused kernels on GPUs
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=enable_gqa)


class InvariantSDPA(TorchFunctionMode):
    """Routes `scaled_dot_product_attention` calls made under it (transformers' "sdpa"
    kernel) to `invariant_attention_forward`; every other call runs as it was."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = _sdpa_arguments(*args, **kwargs) if func is F.scaled_dot_product_attention else None
        return func(*args, **kwargs) if out is None else out


def _sdpa_arguments(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """`invariant_attention_forward` of `scaled_dot_product_attention`'s arguments, as that
    function takes them; None for a call with dropout (training), left to it."""
    if dropout_p:
        return None
    return invariant_attention_forward(query, key, value, attn_mask, scale, is_causal)


def invariant_attention(dtype: torch.dtype, device: torch.device | str):
    """The context a transformers model's forward runs in: `InvariantSDPA` where
    `needs_invariant_attention(dtype, device)`, else nothing (float32 keeps the fused kernel
    and pays nothing). Per thread: another thread's calls are not routed."""
    return InvariantSDPA() if needs_invariant_attention(dtype, device) else contextlib.nullcontext()
