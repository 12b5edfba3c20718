"""Statistical checks that a sampler draws from the distribution it claims.

On a tiny model whose whole sequence space can be enumerated, the exact probability of
every sequence under the sampling transform is a product of conditionals; a chi-square
goodness-of-fit test compares it with the counts of sampled sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmspec.core.contracts import TokenModel
from mmspec.core.sampling import SamplingConfig, target_probs


def all_sequences(vocab_size: int, length: int) -> torch.Tensor:
    """Long `[V**T, T]`: every sequence, in lexicographic order."""
    grids = torch.meshgrid(*[torch.arange(vocab_size)] * length, indexing="ij")
    return torch.stack(grids, dim=-1).reshape(-1, length)


@torch.no_grad()
def sequence_probs(model: TokenModel, condition, sequences: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """float64 `[N]`: the probability of each of `sequences [N, T]` under `sampling`,
    teacher-forced in one forward. `condition` is the batch of N conditions."""
    layout = model.layout()
    N, T = sequences.shape
    session = model.start(condition, guided=sampling.guided)
    inputs = torch.arange(T - 1).expand(N, -1)
    logits = session.forward(sequences[:, :-1], inputs)
    prefill = session.prefill_logits()
    positions = torch.arange(T).expand(N, -1)
    probs = torch.cat(
        [
            target_probs(prefill, positions[:, :1], sampling, layout.allowed_at(positions[:, :1])),
            target_probs(logits, positions[:, 1:], sampling, layout.allowed_at(positions[:, 1:])),
        ],
        dim=1,
    )
    return probs.double().gather(-1, sequences[..., None])[..., 0].prod(-1)


@dataclass
class ChiSquareResult:
    statistic: float
    dof: int
    p_value: float


def chi_square(observed: torch.Tensor, expected_probs: torch.Tensor, min_expected: float = 5.0) -> ChiSquareResult:
    """Pearson's chi-square of counts `observed [K]` against probabilities `expected_probs [K]`.

    Bins expected to hold fewer than `min_expected` samples are pooled into one bin, so
    the chi-square approximation holds. A sample in a bin of probability 0 gives p = 0.
    """
    observed = observed.double()
    n = observed.sum()
    expected = expected_probs.double() / expected_probs.sum() * n
    if bool(((expected == 0) & (observed > 0)).any()):
        return ChiSquareResult(float("inf"), 0, 0.0)
    small = expected < min_expected
    obs = torch.cat([observed[~small], observed[small].sum()[None]])
    exp = torch.cat([expected[~small], expected[small].sum()[None]])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = ((obs - exp) ** 2 / exp).sum()
    dof = int(keep.sum()) - 1
    # survival function of chi2(dof): the regularised upper incomplete gamma Q(dof/2, x/2)
    p = torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), stat / 2)
    return ChiSquareResult(float(stat), dof, float(p))


def sequence_counts(samples: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Counts `[V**T]` of sampled sequences `[N, T]`, in the order of `all_sequences`."""
    T = samples.shape[1]
    weights = vocab_size ** torch.arange(T - 1, -1, -1)
    return torch.bincount((samples * weights).sum(-1), minlength=vocab_size**T)
