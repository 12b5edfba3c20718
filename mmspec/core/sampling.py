"""The sampling transform: logits of a forward -> the distribution p a token is drawn from.

A chain of pure functions (each returns a new tensor), applied in this order:
classifier-free guidance `u + s*(c - u)` on logits, the allowed-token mask, temperature,
top-k, top-p. The mask comes before top-k/top-p so that those count allowed tokens only
(as transformers applies a prefix-constrained processor before its warpers); LlamaGen has
no mask, and for it the order is exactly its `generate.py`. Temperature 0 means greedy:
p is one-hot on the arg-max. Verification compares distributions after this transform.

Tokens are drawn two ways. The keyed family (AR, auto, keyed Jacobi, LPD) draws by
Gumbel-max: the arg-max of the transformed scores (`transformed_scores`: the logits after
mask, temperature, top-k and top-p) plus the position's keyed Gumbel noise
(`mmspec.core.noise`), so a position's token is a function of its key and its distribution
alone. SJD and MC-SJD draw by inverting the CDF at float64 uniforms (`categorical`), so that
any other implementation fed the same uniforms (the Triton kernel) draws the same tokens.
"""

from __future__ import annotations

import numbers

from dataclasses import dataclass

import torch

from mmspec.core.contracts import GuidedLogits


@dataclass(frozen=True)
class SamplingConfig:
    """How a token is drawn from a forward's logits.

    Args:
        guidance_scale (`float`, *optional*, defaults to 1.0): CFG scale s in `u + s*(c - u)`;
            1 disables guidance (no unconditional rows are run).
        guidance_interval (`tuple[int, int]`, *optional*): positions `[start, end)` where CFG
            applies; elsewhere the conditional logits are used alone. LlamaGen's
            `cfg_interval=k` is `(0, k + 2)`.
        temperature (`float`, *optional*, defaults to 1.0): 0 is greedy.
        top_k (`int`, *optional*, defaults to 0): keep the k most likely tokens (ties kept); 0 = all.
        top_p (`float`, *optional*, defaults to 1.0): nucleus mass in (0, 1]; 1 = all.

    Example:
        >>> SamplingConfig(guidance_scale=4.0, top_k=2000).guided
        True
    """

    guidance_scale: float = 1.0
    guidance_interval: tuple[int, int] | None = None
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        for name in ("guidance_scale", "temperature", "top_p"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"{name} must be a number, got {value!r}")
        if not self.guidance_scale >= 0:
            raise ValueError(f"guidance_scale must be >= 0, got {self.guidance_scale}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 keeps all tokens), got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")
        if self.guidance_interval is not None:
            start, end = self.guidance_interval
            if not 0 <= start <= end:
                raise ValueError(f"guidance_interval must be (start, end) with 0 <= start <= end, got {self.guidance_interval}")

    @property
    def guided(self) -> bool:
        return self.guidance_scale != 1.0


def classifier_free_guidance(uncond: torch.Tensor, cond: torch.Tensor, scale: float | torch.Tensor) -> torch.Tensor:
    return uncond + scale * (cond - uncond)


def mask_disallowed(logits: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """`-inf` where `allowed [..., V]` is False."""
    return logits if allowed is None else logits.masked_fill(~allowed, float("-inf"))


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Divides by the temperature; 0 (greedy) is left to `to_probs`."""
    return logits / temperature if temperature not in (0, 1) else logits


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keeps tokens whose logit is at least the k-th largest (ties at the k-th are kept)."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Keeps the smallest set of most likely tokens whose mass reaches p (at least one)."""
    if p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    cumulative = sorted_logits.softmax(-1).cumsum(-1)
    # drop a token when the mass before it already exceeds p (LlamaGen's shift by one):
    # the most likely token is always kept
    drop_sorted = torch.zeros_like(cumulative, dtype=torch.bool)
    drop_sorted[..., 1:] = cumulative[..., :-1] > p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def to_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Softmax in float32; one-hot on the arg-max when temperature is 0."""
    if temperature == 0:
        return torch.zeros_like(logits, dtype=torch.float32).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    return logits.float().softmax(-1)


def guided_logits(logits: GuidedLogits, positions: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """CFG-combined logits `[B, n, V]` (or `[B, n, K, V]`) at the predicted `positions [B, n]`
    (the guidance interval decides, per position, whether the unconditional rows take part)."""
    x = logits.cond
    if not config.guided:
        return x
    if logits.uncond is None:
        raise ValueError("guidance_scale != 1 needs unconditional logits; start the session with guided=True")
    if config.guidance_interval is None:
        return classifier_free_guidance(logits.uncond, x, config.guidance_scale)
    scale = torch.full(positions.shape, config.guidance_scale, dtype=x.dtype, device=x.device)
    start, end = config.guidance_interval
    scale = torch.where((positions >= start) & (positions < end), scale, torch.ones_like(scale))
    return classifier_free_guidance(logits.uncond, x, scale.view(*scale.shape, *[1] * (x.dim() - scale.dim())))


def transformed_scores(logits: torch.Tensor, config: SamplingConfig, allowed: torch.Tensor | None = None) -> torch.Tensor:
    """Mask, temperature, top-k and top-p of CFG-combined `logits [..., V]`: the scores whose
    softmax is p (-inf where a token is out). Gumbel-max draws from them directly."""
    x = mask_disallowed(logits, allowed)
    if config.temperature == 0:  # greedy reads the arg-max alone, which top-k and top-p always keep
        return x
    x = apply_temperature(x, config.temperature)
    x = top_k_filter(x, config.top_k)
    return top_p_filter(x, config.top_p)


def allowed_columns(allowed: torch.Tensor | None) -> torch.Tensor | None:
    """Long `[..., A]`: the tokens each row of `allowed [..., V]` allows, padded with -1, when
    none allows more than a quarter of the vocabulary (an Orpheus slot's 4,096 codes of
    156,940 ids, Emu3's visual tokens); else None. Sampling on those columns alone gives
    the same draws for a fraction of the work."""
    if allowed is None:
        return None
    V = allowed.shape[-1]
    flat = allowed.reshape(-1, V)
    counts = flat.sum(-1)
    width = int(counts.max()) if len(counts) else 0
    if width * 4 > V or width == 0:
        return None
    row, col = flat.nonzero(as_tuple=True)
    within = torch.arange(len(row), device=row.device) - (counts.cumsum(0) - counts)[row]
    columns = torch.full((flat.shape[0], width), -1, dtype=torch.long, device=allowed.device)
    columns[row, within] = col
    return columns.view(*allowed.shape[:-1], width)


def keyed_scores(logits: torch.Tensor, config: SamplingConfig, allowed: torch.Tensor | None = None):
    """`transformed_scores` for a Gumbel-max draw, and the token ids of their last axis: on
    the allowed columns alone when they are few (`allowed_columns`; ids `[..., A]`, -1 for
    padding), else over the whole vocabulary (ids None). `Noise.top(scores, ..., tokens=ids)`
    draws the same tokens either way."""
    columns = allowed_columns(allowed)
    if columns is None:
        return transformed_scores(logits, config, allowed), None
    valid = columns >= 0
    return transformed_scores(logits.gather(-1, columns.clamp(min=0)), config, valid), columns


def transform(logits: torch.Tensor, config: SamplingConfig, allowed: torch.Tensor | None = None) -> torch.Tensor:
    """Mask, temperature, top-k, top-p and softmax of CFG-combined `logits [..., V]`."""
    return to_probs(transformed_scores(logits, config, allowed), config.temperature)


def target_probs(
    logits: GuidedLogits,
    positions: torch.Tensor,
    config: SamplingConfig,
    allowed: torch.Tensor | None = None,
) -> torch.Tensor:
    """The distribution p `[B, n, V]` at the predicted `positions [B, n]`.

    Args:
        logits: a forward's logits (`uncond` must be present when `config.guided`).
        positions: long, the position each logits entry predicts (for the guidance interval).
        allowed: bool `[B, n, V]` allowed-token mask, or None.
    """
    return transform(guided_logits(logits, positions, config), config, allowed)


def uniforms(shape, generator: torch.Generator | None, device) -> torch.Tensor:
    """float64 uniforms in [0, 1) from the caller's generator (drawn on its device)."""
    gen_device = generator.device if generator is not None else torch.device("cpu")
    return torch.rand(shape, generator=generator, dtype=torch.float64, device=gen_device).to(device)


def categorical(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Tokens `[...]` drawn from `probs [..., V]` (need not be normalised) by inverting the
    CDF at uniforms `u [...]`. A token of probability 0 is never returned."""
    cdf = probs.double().cumsum(-1)
    total = cdf[..., -1:]
    # u * total can round up to total: kept below it, the first index whose CDF exceeds the
    # target has mass (zero-mass tokens repeat the CDF, never exceed first)
    target = torch.minimum(u.double()[..., None] * total, total.nextafter(torch.zeros_like(total)))
    return torch.searchsorted(cdf, target, right=True)[..., 0].clamp(max=probs.shape[-1] - 1)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draws one token per distribution of `probs [..., V]`."""
    return categorical(probs, uniforms(probs.shape[:-1], generator, probs.device))
