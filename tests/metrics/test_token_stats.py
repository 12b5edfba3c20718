import math

import pytest
import torch

from mmspec.decoding.generate import generate
from mmspec.core.sampling import SamplingConfig
from mmspec.metrics.token_stats import target_distributions, token_cross_entropy, token_statistics
from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = LlamaGenGPT(LlamaGenConfig(dim=64, n_layer=2, n_head=4, vocab_size=64, block_size=16, num_classes=10, initializer_range=0.5)).eval()
    labels = torch.tensor([1, 4, 7])
    return model, labels


def test_greedy_distributions_are_one_hot(tiny):
    model, labels = tiny
    tokens = torch.randint(0, 64, (3, 16), generator=torch.Generator().manual_seed(0))
    stats = token_statistics(model, labels, tokens, SamplingConfig(temperature=0))
    assert stats["mean_top1_prob"] == pytest.approx(1.0)
    assert stats["entropy_nats"] == pytest.approx(0.0, abs=1e-9)


def test_distributions_are_those_ar_sampled_from(tiny):
    """Teacher forcing reproduces the sampler's p: greedy AR tokens are each p's arg-max."""
    model, labels = tiny
    sampling = SamplingConfig(guidance_scale=3.0, temperature=0)
    tokens, _ = generate(model, labels, decoding="ar", sampling=sampling)
    p = target_distributions(model, labels, tokens, sampling)
    assert torch.equal(p.argmax(-1), tokens)


def test_entropy_is_bounded_by_the_vocabulary(tiny):
    model, labels = tiny
    sampling = SamplingConfig(guidance_scale=2.0, top_k=8)
    tokens, _ = generate(model, labels, decoding="ar", sampling=sampling, generator=torch.Generator().manual_seed(1))
    stats = token_statistics(model, labels, tokens, sampling, batch_size=2)
    assert 0 < stats["entropy_nats"] <= math.log(8) + 1e-6
    assert stats["entropy_bits"] == pytest.approx(stats["entropy_nats"] / math.log(2))
    assert 1 / 8 <= stats["mean_top1_prob"] < 1


def test_cross_entropy_matches_the_training_loss(tiny):
    """The same number as cross-entropy on the full-sequence logits the GPT trains on."""
    model, labels = tiny
    tokens = torch.randint(0, 64, (3, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(model(tokens, labels).flatten(0, 1).double(), tokens.flatten())
    assert token_cross_entropy(model, labels, tokens, batch_size=2) == pytest.approx(float(expected), rel=1e-5)
    with pytest.raises(ValueError, match="one condition per sequence"):
        token_cross_entropy(model, labels[:2], tokens)
