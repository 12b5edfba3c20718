import pytest
import torch

from mmspec.decoding.generate import generate
from mmspec.core.sampling import SamplingConfig
from mmspec.metrics.losslessness import all_sequences, chi_square, sequence_counts, sequence_probs
from tests.decoding.helpers import tiny_model


def test_same_seed_same_tokens():
    model = tiny_model(vocab_size=16, block_size=16)
    sampling = SamplingConfig(guidance_scale=2.0, top_k=8)
    labels = torch.tensor([0, 1, 2])
    a, _ = generate(model, labels, decoding="ar", sampling=sampling, generator=torch.Generator().manual_seed(7))
    b, _ = generate(model, labels, decoding="ar", sampling=sampling, generator=torch.Generator().manual_seed(7))
    c, _ = generate(model, labels, decoding="ar", sampling=sampling, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_greedy_follows_the_teacher_forced_argmax():
    model = tiny_model(vocab_size=16, block_size=9)
    labels = torch.tensor([0, 2])
    sampling = SamplingConfig(guidance_scale=3.0, temperature=0)
    tokens, stats = generate(model, labels, decoding="ar", sampling=sampling)
    with torch.no_grad():
        cond = model(tokens, labels)
        uncond = model(tokens, torch.full_like(labels, 3))
    expected = (uncond + 3.0 * (cond - uncond)).argmax(-1)
    assert torch.equal(tokens, expected)
    assert stats.forward_passes == 9 and stats.tokens_per_forward == 1.0
    assert stats.commit_iteration[0].tolist() == list(range(9))


def test_batch_of_conditions_equals_each_alone_under_greedy():
    model = tiny_model(vocab_size=16, block_size=9)
    sampling = SamplingConfig(guidance_scale=2.0, temperature=0)
    both, _ = generate(model, torch.tensor([0, 1]), decoding="ar", sampling=sampling)
    first, _ = generate(model, torch.tensor([0]), decoding="ar", sampling=sampling)
    second, _ = generate(model, torch.tensor([1]), decoding="ar", sampling=sampling)
    assert torch.equal(both, torch.cat([first, second]))


@pytest.fixture(scope="module")
def ar_samples():
    """40,000 sequences of 4 tokens over V=4 (256 possible), CFG 2 and top-k 3."""
    model = tiny_model()
    sampling = SamplingConfig(guidance_scale=2.0, top_k=3)
    n = 40_000
    labels = torch.full((n,), 1)
    tokens, _ = generate(model, labels, decoding="ar", sampling=sampling, generator=torch.Generator().manual_seed(1234))
    return model, sampling, tokens


@pytest.mark.statistical
def test_ar_draws_the_product_of_conditionals(ar_samples):
    """Chi-square over all 256 sequences at a fixed seed (so it cannot flake). 40,000
    samples are enough to reject a +-5% bias on the sequence probabilities at the 1e-3
    threshold used here: see the negative control below."""
    model, sampling, tokens = ar_samples
    seqs = all_sequences(4, 4)
    probs = sequence_probs(model, torch.full((len(seqs),), 1), seqs, sampling)
    torch.testing.assert_close(probs.sum(), torch.tensor(1.0, dtype=torch.float64))
    result = chi_square(sequence_counts(tokens, 4), probs)
    assert result.p_value > 1e-3, result


@pytest.mark.statistical
def test_chi_square_rejects_a_slightly_wrong_distribution(ar_samples):
    """Negative control: the same samples against the true distribution with every
    sequence probability off by 5% (up and down alternately by rank) are rejected."""
    model, sampling, tokens = ar_samples
    seqs = all_sequences(4, 4)
    probs = sequence_probs(model, torch.full((len(seqs),), 1), seqs, sampling)
    rank = probs.argsort(descending=True).argsort()
    tilted = probs * torch.where(rank % 2 == 0, 1.05, 0.95)
    assert chi_square(sequence_counts(tokens, 4), tilted).p_value < 1e-3


def test_unknown_decoding_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown decoding .fast.; choose from ar, sjd"):
        generate(tiny_model(), torch.tensor([0]), decoding="fast")
