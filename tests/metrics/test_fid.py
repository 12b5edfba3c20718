import pytest
import torch

from mmspec.metrics.fid import frechet_distance


def _features(n=400, d=16, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed)) @ torch.randn(d, d, generator=torch.Generator().manual_seed(seed + 1))


def test_identical_sets_have_zero_distance():
    a = _features()
    assert frechet_distance(a, a.clone()) == 0.0


def test_a_shift_adds_its_squared_length():
    """Equal covariances: the distance is exactly |mu_a - mu_b|^2 (up to round-off)."""
    a = _features()
    shift = torch.full((16,), 0.5)
    assert frechet_distance(a, a + shift) == pytest.approx(float(shift.pow(2).sum()), rel=1e-6)


def test_different_distributions_are_positive_and_symmetric():
    a, b = _features(seed=0), 2 * _features(seed=2)
    d = frechet_distance(a, b)
    assert d > 1.0
    assert frechet_distance(b, a) == pytest.approx(d, rel=1e-6)


def test_mismatched_shapes_are_a_value_error():
    with pytest.raises(ValueError, match="same D"):
        frechet_distance(torch.zeros(10, 3), torch.zeros(10, 4))
    with pytest.raises(ValueError, match="at least 2"):
        frechet_distance(torch.zeros(1, 3), torch.zeros(10, 3))
