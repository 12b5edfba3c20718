"""Variable length: stop tokens end each sequence of a batch on its own."""

import pytest
import torch

from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from mmspec.metrics.losslessness import all_sequences, chi_square, sequence_counts, sequence_probs
from tests.decoding.helpers import tiny_model

SAMPLING = SamplingConfig(guidance_scale=2.0, top_k=3)
STOP = 3
N_SAMPLES = 40_000


def truncated(sequences: torch.Tensor, stop: int) -> torch.Tensor:
    """Sequences with every position after the first stop token set to the stop token (the pad)."""
    after = (sequences == stop).long().cumsum(1) - (sequences == stop).long() > 0
    return sequences.masked_fill(after, stop)


@pytest.fixture(scope="module")
def stopped_distribution():
    """The probability of every sequence as the sampler returns it: the probabilities of
    the full sequences that share a prefix up to their first stop token, summed."""
    model = tiny_model()
    seqs = all_sequences(4, 4)
    probs = sequence_probs(model, torch.full((len(seqs),), 1), seqs, SAMPLING)
    weights = 4 ** torch.arange(3, -1, -1)
    expected = torch.zeros(len(seqs), dtype=torch.float64).index_add_(0, (truncated(seqs, STOP) * weights).sum(-1), probs)
    return model, expected


@pytest.mark.statistical
@pytest.mark.parametrize("config", [DecodingConfig(method="sjd", window=3), DecodingConfig(method="mc-sjd", window=2),
                                    DecodingConfig(method="ar")], ids=lambda c: c.name)
def test_stop_tokens_keep_the_distribution(stopped_distribution, config):
    """Sequences of several lengths in one batch of 40,000: chi-square against the exact
    distribution of stopped sequences; lengths say where each stopped."""
    model, expected = stopped_distribution
    tokens, stats = generate(model, torch.full((N_SAMPLES,), 1), decoding=config, sampling=SAMPLING,
                             generator=torch.Generator().manual_seed(2), stop_tokens=[STOP])
    assert len(set(stats.lengths.tolist())) >= 3  # several lengths in one batch
    has_stop = (tokens == STOP).any(1)
    first = torch.where(has_stop, (tokens == STOP).long().argmax(1) + 1, 4)
    assert torch.equal(stats.lengths, first)
    assert chi_square(sequence_counts(tokens, 4), expected).p_value > 1e-3


def greedy_runs(decoding, stop, pad=None):
    model = tiny_model(vocab_size=16, block_size=16, seed=3)
    sampling = SamplingConfig(guidance_scale=2.0, temperature=0)
    return generate(model, torch.tensor([0, 1, 2]), decoding=decoding, sampling=sampling, stop_tokens=stop,
                    pad_token_id=pad, generator=torch.Generator().manual_seed(0))


def test_greedy_batch_stopping_at_different_points_equals_ar():
    full, _ = greedy_runs("ar", ())
    # a stop id that the three greedy sequences first reach at different positions
    firsts = {int(t): [int((row == t).nonzero()[0]) if (row == t).any() else 16 for row in full] for t in full.unique()}
    stop, where = max(firsts.items(), key=lambda kv: (len(set(kv[1])), -max(kv[1])))
    assert len(set(where)) > 1
    ar, ar_stats = greedy_runs("ar", [stop], pad=-1)
    for name in ("sjd", "mc-sjd"):
        config = DecodingConfig.from_name(name, window=5)
        tokens, stats = greedy_runs(config, [stop], pad=-1)
        assert torch.equal(tokens, ar), name
        assert torch.equal(stats.lengths, ar_stats.lengths)
        assert stats.lengths.tolist() == [min(w + 1, 16) for w in where]
        assert stats.forward_passes <= ar_stats.forward_passes
    assert ar_stats.forward_passes == max(min(w + 1, 16) for w in where)
    assert (ar[:, -1] == -1).any()  # padding after a stop


def test_finished_sequences_do_not_change_the_others():
    """Greedy: a sequence that stops early leaves its batch mates' tokens as they are alone."""
    model = tiny_model(vocab_size=16, block_size=16, seed=3)
    sampling = SamplingConfig(temperature=0)
    both, _ = generate(model, torch.tensor([0, 1]), decoding="mc-sjd", sampling=sampling, stop_tokens=[5])
    alone, _ = generate(model, torch.tensor([1]), decoding="mc-sjd", sampling=sampling, stop_tokens=[5])
    assert torch.equal(both[1:], alone)


def test_max_length_cuts_every_method():
    model = tiny_model(vocab_size=16, block_size=16)
    for name in ("ar", "sjd", "zipar+mc-sjd"):
        tokens, stats = generate(model, torch.tensor([0, 1]), decoding=name, max_length=7,
                                 generator=torch.Generator().manual_seed(0))
        assert tokens.shape == (2, 7) and stats.lengths.tolist() == [7, 7]
