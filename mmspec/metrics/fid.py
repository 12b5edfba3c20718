"""Fréchet distance between two sets of feature vectors (the FID formula).

`feature_fid` is the FID formula on the penultimate features of the Shapes classifier
(`mmspec.metrics.classifier`) instead of Inception-v3 pool features: Inception FID needs
the Inception weights, which cannot be downloaded on our machines. Values are therefore
comparable with each other, not with published FIDs.

    d^2 = |mu_1 - mu_2|^2 + tr(S_1 + S_2 - 2 (S_1^1/2 S_2 S_1^1/2)^1/2)

computed in float64 with symmetric eigen-decompositions (no scipy): the trace of the
matrix square root of S_1^1/2 S_2 S_1^1/2 (symmetric PSD) is the sum of the square roots
of its eigenvalues, and it equals tr((S_1 S_2)^1/2).

Example:
    >>> import torch
    >>> a = torch.randn(500, 8, generator=torch.Generator().manual_seed(0))
    >>> frechet_distance(a, a)
    0.0
"""

from __future__ import annotations

import torch


def _psd_sqrt(m: torch.Tensor) -> torch.Tensor:
    """Square root of a symmetric PSD matrix; round-off negative eigenvalues are clipped."""
    w, v = torch.linalg.eigh(m)
    return (v * w.clamp(min=0).sqrt()) @ v.T


def frechet_distance(features_a: torch.Tensor, features_b: torch.Tensor) -> float:
    """Fréchet distance between Gaussians fitted to `features_a [N, D]` and `features_b [M, D]`.

    Args:
        features_a (`torch.Tensor`): `[N, D]`, N >= 2.
        features_b (`torch.Tensor`): `[M, D]`, M >= 2, same D.

    Returns:
        the squared Fréchet distance (>= 0; exactly 0 for identical sets).
    """
    if features_a.dim() != 2 or features_b.dim() != 2 or features_a.shape[1] != features_b.shape[1]:
        raise ValueError(f"features must be [N, D] and [M, D] with the same D, got {tuple(features_a.shape)} and {tuple(features_b.shape)}")
    if len(features_a) < 2 or len(features_b) < 2:
        raise ValueError(f"each set needs at least 2 vectors for a covariance, got {len(features_a)} and {len(features_b)}")
    a, b = features_a.double(), features_b.double()
    if torch.equal(a, b):
        return 0.0  # the eigen route leaves ~1e-12 of round-off where the answer is exactly 0
    mu_a, mu_b = a.mean(0), b.mean(0)
    cov_a, cov_b = torch.cov(a.T), torch.cov(b.T)
    sqrt_a = _psd_sqrt(cov_a)
    cross = torch.linalg.eigvalsh(sqrt_a @ cov_b @ sqrt_a).clamp(min=0).sqrt().sum()
    d2 = (mu_a - mu_b).pow(2).sum() + cov_a.trace() + cov_b.trace() - 2 * cross
    return max(float(d2), 0.0)
