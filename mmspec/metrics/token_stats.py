"""How peaked a model's token distributions are under given sampling settings.

Visual AR models spread probability over many tokens (a low mean top-1 probability and a
high entropy), which is why parallel decoding of images is hard and worth measuring; a
near-deterministic model would make acceleration numbers meaningless. These statistics
are computed on the distributions p the sampler draws from: the generated tokens are
teacher-forced through the model in one forward and `mmspec.core.sampling.target_probs`
is applied to every position, which is exactly what AR decoding sampled from.

Example:
    >>> import torch
    >>> from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT
    >>> from mmspec.core.sampling import SamplingConfig
    >>> model = LlamaGenGPT(LlamaGenConfig(dim=64, n_layer=2, n_head=4, vocab_size=64, block_size=16, num_classes=10))
    >>> stats = token_statistics(model, torch.tensor([1, 2]), torch.zeros(2, 16, dtype=torch.long), SamplingConfig())
    >>> sorted(stats)
    ['entropy_bits', 'entropy_nats', 'mean_top1_prob']
"""

from __future__ import annotations

import math

import torch

from mmspec.core.contracts import TokenModel
from mmspec.core.sampling import SamplingConfig, target_probs


@torch.no_grad()
def target_distributions(model: TokenModel, condition, tokens: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """The distributions p `[B, T, V]` from which each of `tokens [B, T]` was (or would be)
    drawn under `sampling`, by teacher forcing in one forward."""
    B, T = tokens.shape
    layout = model.layout()
    if T != layout.length:
        raise ValueError(f"tokens must be [B, {layout.length}] (the model's sequence length), got {tuple(tokens.shape)}")
    session = model.start(condition, guided=sampling.guided)
    positions = torch.arange(T, device=tokens.device).expand(B, T)
    first = target_probs(session.prefill_logits(), positions[:, :1], sampling, layout.allowed_at(positions[:, :1]))
    if T == 1:
        return first
    logits = session.forward(tokens[:, :-1], positions[:, :-1])
    rest = target_probs(logits, positions[:, 1:], sampling, layout.allowed_at(positions[:, 1:]))
    return torch.cat([first, rest], dim=1)


def _batched_distributions(model: TokenModel, condition, tokens: torch.Tensor, sampling: SamplingConfig, batch_size: int):
    """Yields `(rows [b, T], p [b, T, V] in float64)` over `tokens`, `batch_size` rows at a time."""
    condition = torch.as_tensor(condition)
    if len(condition) != len(tokens):
        raise ValueError(f"one condition per sequence: got {len(condition)} conditions for {len(tokens)} sequences")
    for start in range(0, len(tokens), batch_size):
        rows = tokens[start : start + batch_size]
        yield rows, target_distributions(model, condition[start : start + batch_size], rows, sampling).double()


def token_statistics(model: TokenModel, condition, tokens: torch.Tensor, sampling: SamplingConfig, batch_size: int = 50) -> dict[str, float]:
    """Mean top-1 probability and mean entropy (nats and bits) per token of p.

    Args:
        model (`TokenModel`): the generator.
        condition: what `model.start` takes, one per row of `tokens` (class labels `[B]`).
        tokens (`torch.Tensor`): long `[B, T]`, generated sequences.
        sampling (`SamplingConfig`): the settings they were sampled with.
        batch_size (`int`, *optional*, defaults to 50): rows per forward.
    """
    top1, entropy, n = 0.0, 0.0, 0
    for rows, p in _batched_distributions(model, condition, tokens, sampling, batch_size):
        top1 += float(p.max(-1).values.sum())
        entropy += float(-(p * p.clamp(min=1e-300).log()).sum(-1).sum())
        n += rows.numel()
    return {"mean_top1_prob": top1 / n, "entropy_nats": entropy / n, "entropy_bits": entropy / n / math.log(2)}


def token_cross_entropy(model: TokenModel, condition, tokens: torch.Tensor, batch_size: int = 50) -> float:
    """Mean negative log-likelihood (nats per token) of `tokens [B, T]` under the plain
    conditional model (no CFG, T = 1). On training and held-out sequences it shows whether
    a model is short of capacity (both high, close) or of data (held-out far above)."""
    total, n = 0.0, 0
    for rows, p in _batched_distributions(model, condition, tokens, SamplingConfig(), batch_size):
        total -= float(p.gather(-1, rows[..., None]).clamp(min=1e-300).log().sum())
        n += rows.numel()
    return total / n
