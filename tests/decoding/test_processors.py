"""History-dependent logits processors, applied at every window slot with the drafts
before it as its history."""

import pytest
import torch

from mmspec.core.processors import MinLength, NoRepeatNGram, RepetitionPenalty
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from mmspec.metrics.losslessness import chi_square
from tests.decoding.helpers import tiny_model
from tests.decoding.step_model import StepModel, all_step_sequences, step_counts


def test_repetition_penalty_scales_seen_tokens_as_transformers_does():
    logits = torch.tensor([[2.0, -1.0, 3.0, 1.0]])
    history = torch.tensor([[0, 1, -1]])
    out = RepetitionPenalty(2.0)(None, history, torch.tensor([2]), logits)
    assert out.tolist() == [[1.0, -2.0, 3.0, 1.0]]


def test_no_repeat_ngram_bans_the_completion_of_a_seen_ngram():
    history = torch.tensor([[1, 2, 3, 1, 2, -1]])
    out = NoRepeatNGram(3)(torch.tensor([[0, 1]]), history, torch.tensor([5]), torch.zeros(1, 5))
    assert torch.isinf(out[0, 3]) and torch.isfinite(out[0, [0, 1, 2, 4]]).all()
    # the first generated token continues the prompt "1 2 1": "1 2" was seen, so 2 is banned
    out = NoRepeatNGram(2)(torch.tensor([[1, 2, 1]]), torch.tensor([[-1, -1]]), torch.tensor([0]), torch.zeros(1, 5))
    assert torch.isinf(out[0, 2]) and torch.isfinite(out[0, [0, 1, 3, 4]]).all()


def test_min_length_bans_stop_tokens_early():
    out = MinLength(2, [3])(None, torch.full((2, 4), -1), torch.tensor([1, 2]), torch.zeros(2, 4))
    assert torch.isinf(out[0, 3]) and torch.isfinite(out[1]).all()


@pytest.mark.parametrize("processors", [[RepetitionPenalty(1.8)], [NoRepeatNGram(2)], [RepetitionPenalty(1.3), MinLength(5, [7])]],
                         ids=["repetition", "no-repeat-2gram", "repetition+min-length"])
@pytest.mark.parametrize("name", ["sjd", "mc-sjd", "zipar+mc-sjd"])
def test_greedy_jacobi_with_processors_is_ar(processors, name):
    model = tiny_model(vocab_size=16, block_size=16)
    sampling = SamplingConfig(guidance_scale=2.0, temperature=0)
    labels = torch.tensor([0, 1, 2])
    ar, _ = generate(model, labels, decoding="ar", sampling=sampling, processors=processors)
    plain, _ = generate(model, labels, decoding="ar", sampling=sampling)
    assert not torch.equal(ar, plain)  # the processors change the output
    config = DecodingConfig.from_name(name, window=4, zipar_window=2)
    tokens, _ = generate(model, labels, decoding=config, sampling=sampling, processors=processors,
                         generator=torch.Generator().manual_seed(0))
    if config.exact:
        assert torch.equal(tokens, ar)
    else:
        assert (tokens >= 0).all()


@pytest.mark.statistical
def test_repetition_penalty_keeps_jacobi_lossless():
    """Exact probabilities of every sequence under the penalty (one codebook, V = 3,
    4 steps), against MC-SJD's samples."""
    model = StepModel(vocab_size=3, tokens_per_step=1, length=4, seed=3)
    sampling = SamplingConfig()
    penalty = RepetitionPenalty(2.5)
    seqs = all_step_sequences(model)  # [81, 4, 1]
    probs = torch.ones(len(seqs), dtype=torch.float64)
    session = model.start(torch.zeros(len(seqs)), guided=False)
    inputs = seqs[:, :-1, 0]
    logits = torch.cat([session.prefill_logits().cond, session.forward(inputs, torch.arange(3).expand(len(seqs), 3)).cond], 1)
    for t in range(4):
        history = torch.where(torch.arange(4) < t, seqs[..., 0], -1)
        p = penalty(None, history, torch.full((len(seqs),), t), logits[:, t]).softmax(-1).double()
        probs *= p.gather(-1, seqs[:, t])[:, 0]
    tokens, _ = generate(model, torch.zeros(40_000), decoding=DecodingConfig(method="mc-sjd", window=3), sampling=sampling,
                         processors=[penalty], generator=torch.Generator().manual_seed(8))
    assert chi_square(step_counts(model, tokens[..., None]), probs).p_value > 1e-3
