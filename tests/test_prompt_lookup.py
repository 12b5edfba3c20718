"""Prompt-lookup decoding: lossless sampling with EOS, top-k and temperature; transformers'
greedy output for a left-padded batch; the phrase drafter's substitution rule; errors."""

import pytest
import torch

from mmspec.core.layout import TokenLayout
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.drafts import DraftContext
from mmspec.metrics.losslessness import all_sequences, chi_square, sequence_counts, sequence_probs
from mmspec.models.transformers_lm import TransformersLM
from mmspec.prompt_lookup import PhraseLookup, prompt_lookup_text
from tests.test_text import EOS, stopped, tiny_lm


def test_sampling_with_eos_top_k_and_temperature_is_lossless():
    """6,000 outputs of 3 new tokens after a prompt whose repeats give lookup drafts are
    drawn as often as the model's temperature-0.8, top-4 distribution says (chi-square,
    fixed seed); a wrong rule for rejected drafts (p without removing d) fails it."""
    V, T, n = 6, 3, 6000
    model = tiny_lm(V)
    prompt = torch.tensor([[1, 3, 4, 3, 4, 2, 3]])
    sequences = all_sequences(V, T)
    probs = sequence_probs(TransformersLM(model, T), {"input_ids": prompt.expand(len(sequences), -1)}, sequences,
                           SamplingConfig(temperature=0.8, top_k=4))
    outputs = stopped(sequences)
    expected = torch.zeros(V**T, dtype=torch.float64).index_add_(0, (outputs * V ** torch.arange(T - 1, -1, -1)).sum(1), probs)
    ids, stats = prompt_lookup_text(model, prompt.expand(n, -1), max_new_tokens=T, do_sample=True, temperature=0.8, top_k=4,
                                    generator=torch.Generator().manual_seed(5))
    new = torch.cat([ids[:, prompt.shape[1]:], ids.new_full((n, T - ids.shape[1] + prompt.shape[1]), EOS)], 1)
    counts = sequence_counts(new, V)
    index = expected.nonzero()[:, 0]
    assert counts[expected == 0].sum() == 0
    assert chi_square(counts[index], expected[index]).p_value > 1e-3
    assert stats.forward_passes < T + 1  # drafts were accepted somewhere in the batch


def test_greedy_matches_transformers_for_a_left_padded_batch_with_eos():
    model = tiny_lm(8, seed=6)
    prompts = [[1, 3, 4, 5, 3, 4], [2, 5, 6, 5, 6, 5, 6, 2, 5], [7, 3]]
    P = max(map(len, prompts))
    ids = torch.tensor([[EOS] * (P - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (P - len(p)) + [1] * len(p) for p in prompts])
    expected = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=EOS,
                              eos_token_id=EOS)
    assert (expected[:, P:] == EOS).any(), "the case needs an EOS inside the window"
    out, stats = prompt_lookup_text(model, ids, mask, max_new_tokens=12, do_sample=False, pad_token_id=EOS, eos_token_id=EOS)
    assert torch.equal(out, expected)
    assert stats.method == "prompt-lookup" and stats.exact


def test_phrase_lookup_skips_a_substituted_word():
    """History "on a 7" after a prompt "on a 5 9 ...": no n-gram ending in 7 occurs, so the
    draft is what followed the word that 7 replaced (9)."""
    prompt = torch.tensor([[3, 4, 5, 9, 6]])[..., None]  # on a blue background with
    history = torch.tensor([[3, 4, 7, -1, -1]])[..., None]
    ctx = DraftContext(TokenLayout.grid((5,), 10, axes=("step",)), history, prompt)
    proposed = PhraseLookup().propose(ctx, torch.tensor([3]), torch.zeros(1, 1), None)
    assert proposed.tolist() == [[9]]
    history[0, 2, 0] = 5  # the same word: the plain n-gram wins
    assert PhraseLookup().propose(ctx, torch.tensor([3]), torch.zeros(1, 1), None).tolist() == [[9]]
    history[0, :3, 0] = torch.tensor([8, 2, 1])  # nothing to copy
    assert PhraseLookup().propose(ctx, torch.tensor([3]), torch.zeros(1, 1), None).tolist() == [[-1]]


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_drafts=0), "num_drafts must be a whole number >= 1"),
    (dict(repetition_penalty=1.2), "does not apply repetition_penalty"),
    (dict(max_new_tokens=0), "max_new_tokens must be a whole number >= 1"),
    (dict(beams=2), "does not take beams"),
])
def test_bad_input_gets_a_one_line_error(kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        prompt_lookup_text(tiny_lm(), torch.tensor([[1, 2, 3]]), **{"max_new_tokens": 4, **kwargs})
    assert "\n" not in str(err.value)
