"""K tokens per step (the codebooks of an audio frame), verified exactly step by step."""

import pytest
import torch

from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from mmspec.metrics.losslessness import chi_square
from tests.decoding.step_model import StepModel, all_step_sequences, step_counts

N_SAMPLES = 40_000


def test_the_session_sees_only_committed_steps():
    """The toy model's own check: a step fed without its predecessor gets other logits."""
    model = StepModel()
    session = model.start(torch.zeros(1), guided=False)
    step = torch.tensor([[[1, 2]]])
    alone = session.forward(step, torch.tensor([[1]])).cond
    session.forward(torch.tensor([[[0, 1]]]), torch.tensor([[0]]))
    session.commit(torch.tensor([[0]]), torch.tensor([[True]]))
    after = session.forward(step, torch.tensor([[1]])).cond
    assert alone.shape == (1, 1, 2, 3) and not torch.equal(alone, after)


@pytest.mark.statistical
@pytest.mark.parametrize("config", [DecodingConfig(method="ar"), DecodingConfig(method="sjd", window=2),
                                    DecodingConfig(method="mc-sjd", window=3), DecodingConfig(method="mc-sjd", window=2, init="previous-step"),
                                    DecodingConfig(method="sjd", window=2, step_test="joint"),
                                    DecodingConfig(method="mc-sjd", window=3, step_test="joint")],
                         ids=lambda c: c.describe())
def test_two_tokens_per_step_are_lossless(config):
    """All 729 sequences of 3 steps x 2 codebooks (V = 3): chi-square at a fixed seed."""
    model = StepModel()
    sampling = SamplingConfig(temperature=0.9)
    probs = model.sequence_probs(all_step_sequences(model), sampling)
    tokens, stats = generate(model, torch.zeros(N_SAMPLES), decoding=config, sampling=sampling,
                             generator=torch.Generator().manual_seed(4))
    assert tokens.shape == (N_SAMPLES, 3, 2)
    assert chi_square(step_counts(model, tokens), probs).p_value > 1e-3
    if config.method != "ar":
        assert stats.forward_passes_per_sample.float().mean() < 3  # some steps were accepted


def test_rejected_codebooks_are_redrawn_and_accepted_ones_kept():
    """A rejected step keeps its accepted codebooks: the reference decides per token."""
    from mmspec.kernels.verify import verify

    p = torch.tensor([[0.0, 1.0], [1.0, 0.0]])[None, None]  # one slot, K = 2, V = 2
    drafts = torch.tensor([[[1, 1]]])  # codebook 0 accepted (p = 1), codebook 1 rejected (p = 0)
    u = torch.full((1, 1, 2), 0.5, dtype=torch.float64)
    out = verify(p, None, drafts, torch.tensor([1]), u, u)
    assert out.accepted.tolist() == [0] and out.run_length.tolist() == [1]
    assert out.tokens.tolist() == [[[1, 0]]]


@pytest.mark.parametrize("name", ["sjd", "mc-sjd"])
@pytest.mark.parametrize("window", [1, 2, 5])
def test_greedy_with_k_tokens_per_step_is_ar(name, window):
    model = StepModel(vocab_size=4, tokens_per_step=3, length=6, seed=1)
    sampling = SamplingConfig(temperature=0)
    ar, _ = generate(model, torch.zeros(4), decoding="ar", sampling=sampling)
    tokens, stats = generate(model, torch.zeros(4), decoding=DecodingConfig.from_name(name, window=window), sampling=sampling,
                             generator=torch.Generator().manual_seed(0))
    assert torch.equal(tokens, ar)
    assert stats.tokens_committed == 4 * 6 * 3
