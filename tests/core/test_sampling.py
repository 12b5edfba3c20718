import pytest
import torch

from mmspec.core.contracts import GuidedLogits
from mmspec.core.sampling import (
    SamplingConfig,
    apply_temperature,
    categorical,
    classifier_free_guidance,
    mask_disallowed,
    sample,
    target_probs,
    to_probs,
    top_k_filter,
    top_p_filter,
)


def test_transforms_leave_their_input_unchanged():
    logits = torch.randn(2, 3, 10)
    before = logits.clone()
    allowed = torch.rand(2, 3, 10) > 0.3
    allowed[..., 0] = True
    for out in (
        classifier_free_guidance(logits, logits * 2, 3.0),
        mask_disallowed(logits, allowed),
        apply_temperature(logits, 0.5),
        top_k_filter(logits, 3),
        top_p_filter(logits, 0.5),
        to_probs(logits, 1.0),
    ):
        assert out is not logits
    assert torch.equal(logits, before)


def test_cfg_is_u_plus_s_times_c_minus_u():
    u, c = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 0.0])
    assert torch.equal(classifier_free_guidance(u, c, 4.0), torch.tensor([9.0, -6.0]))


def test_top_k_keeps_ties_at_the_kth():
    logits = torch.tensor([3.0, 1.0, 2.0, 2.0, 0.0])
    kept = top_k_filter(logits, 3).isfinite()
    assert kept.tolist() == [True, False, True, True, False]


def test_top_p_keeps_the_first_token_over_the_mass():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    kept = top_p_filter(probs.log(), 0.7).isfinite()
    assert kept.tolist() == [True, True, False, False]  # 0.5 < 0.7, 0.8 >= 0.7 stops
    assert top_p_filter(probs.log(), 0.1).isfinite().tolist() == [True, False, False, False]


def test_greedy_is_one_hot_on_argmax():
    p = to_probs(torch.tensor([[0.1, 2.0, -1.0]]), temperature=0)
    assert p.tolist() == [[0.0, 1.0, 0.0]]


def test_guidance_interval_switches_cfg_off_outside():
    cond, uncond = torch.tensor([[[2.0, 0.0]] * 3]), torch.tensor([[[0.0, 0.0]] * 3])
    cfg = SamplingConfig(guidance_scale=3.0, guidance_interval=(1, 2))
    p = target_probs(GuidedLogits(cond, uncond), torch.tensor([[0, 1, 2]]), cfg)
    inside = torch.tensor([6.0, 0.0]).softmax(-1)
    outside = torch.tensor([2.0, 0.0]).softmax(-1)
    torch.testing.assert_close(p[0], torch.stack([outside, inside, outside]))


def test_allowed_mask_applies_before_top_k():
    logits = GuidedLogits(torch.tensor([[[5.0, 4.0, 3.0, 2.0]]]))
    allowed = torch.tensor([[[False, False, True, True]]])
    p = target_probs(logits, torch.zeros(1, 1, dtype=torch.long), SamplingConfig(top_k=1), allowed)
    assert p.tolist() == [[[0.0, 0.0, 1.0, 0.0]]]


def test_categorical_never_draws_zero_mass_and_inverts_the_cdf():
    probs = torch.tensor([0.0, 0.25, 0.0, 0.75, 0.0])
    u = torch.tensor([0.0, 0.2499, 0.25, 0.9999999999, 1.0 - 2**-53], dtype=torch.float64)
    assert categorical(probs.expand(5, -1), u).tolist() == [1, 1, 3, 3, 3]


def test_sample_follows_the_generator():
    probs = torch.rand(4, 50).softmax(-1)
    a = sample(probs, torch.Generator().manual_seed(3))
    b = sample(probs, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(top_k=-1), "top_k must be an integer >= 0"),
        (dict(top_p=0.0), r"top_p must lie in \(0, 1\]"),
        (dict(top_p=1.5), r"top_p must lie in \(0, 1\]"),
        (dict(guidance_scale=-0.5), "guidance_scale must be >= 0"),
        (dict(temperature=-1.0), "temperature must be >= 0"),
        (dict(guidance_interval=(5, 2)), "guidance_interval"),
    ],
)
def test_bad_sampling_settings_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingConfig(**kwargs)
