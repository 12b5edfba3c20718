"""Keyed noise: Philox4x32-10 against its published known answers and Python's integers,
53-bit uniforms, Gumbel noise made densely, sparsely and from the remembered tiles alike,
and keys drawn once per row from the caller's generator(s)."""

import math

import pytest
import torch

from mmspec.core.noise import COLUMN_SLOTS, MASK32, Noise, SlotNoise, as_noise, philox4x32, words_to_uniform
from mmspec.core.sampling import SamplingConfig, keyed_scores, transformed_scores

# Random123's known-answer vectors for philox4x32_10 (counter, key -> four words)
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((MASK32,) * 4, (MASK32, MASK32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0), (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def python_philox(c, k):
    """Philox4x32-10 in Python integers, written from the algorithm's definition."""
    c, k = list(c), list(k)
    for i in range(10):
        if i:
            k = [(k[0] + 0x9E3779B9) & MASK32, (k[1] + 0xBB67AE85) & MASK32]
        a, b = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(b >> 32) ^ c[1] ^ k[0], b & MASK32, (a >> 32) ^ c[3] ^ k[1], a & MASK32]
    return c


@pytest.mark.parametrize("counter,key,expected", KNOWN_ANSWERS)
def test_philox_gives_the_known_answers(counter, key, expected):
    words = philox4x32(*(torch.tensor(x) for x in counter), *(torch.tensor(x) for x in key))
    assert [int(w) for w in words] == list(expected)


def test_philox_equals_python_integers_on_random_words():
    g = torch.Generator().manual_seed(0)
    counters = torch.randint(0, 2**32, (4, 500), generator=g)
    keys = torch.randint(0, 2**32, (2, 500), generator=g)
    ours = torch.stack(philox4x32(*counters, *keys))
    for i in range(500):
        assert ours[:, i].tolist() == python_philox(counters[:, i].tolist(), keys[:, i].tolist())


def test_uniforms_use_53_bits_and_stay_below_one():
    top = torch.tensor(MASK32)
    assert words_to_uniform(top, top).item() == (2**53 - 1) / 2**53 < 1
    assert words_to_uniform(torch.tensor(0), torch.tensor(64)).item() == 2**-53


def test_noise_is_a_function_of_its_coordinates_alone():
    noise = Noise.from_generator(torch.Generator().manual_seed(0), 3)
    rows, positions = torch.tensor([2, 0]), torch.tensor([[4, 5, 6], [0, 1, 2]])
    u = noise.uniform("verify", rows, positions, 2, attempt=torch.zeros(2, 3, dtype=torch.long))
    # the same coordinates asked in another order, or a row at a time, give the same numbers
    assert torch.equal(noise.uniform("verify", rows.flip(0), positions.flip(0), 2).flip(0), u)
    assert torch.equal(noise.uniform("verify", rows[1:], positions[1:, 1:], 2), u[1:, 1:])
    # another stream, attempt, row or key gives other numbers
    assert not torch.equal(noise.uniform("draft", rows, positions, 2), u)
    assert not torch.equal(noise.uniform("verify", rows, positions, 2, attempt=1), u)
    assert not torch.equal(noise.uniform("verify", rows.flip(0), positions, 2), u)
    assert not torch.equal(Noise.from_generator(torch.Generator().manual_seed(1), 3).uniform("verify", rows, positions, 2), u)


def test_gumbel_noise_is_the_same_made_densely_sparsely_or_remembered():
    noise = Noise.from_generator(torch.Generator().manual_seed(0), 2)
    rows, positions = torch.tensor([1, 0]), torch.tensor([[3, 40, 41], [0, 1, 70]])
    dense = noise.gumbel(rows, positions, 2, 101)
    tokens = torch.randint(0, 101, (2, 3, 2, 9), generator=torch.Generator().manual_seed(1))
    assert torch.equal(noise.gumbel_at(rows, positions, tokens), dense.gather(-1, tokens))
    noise.remember(1, 2, 101)  # room for 4 tiles of 32 positions per row: these need 3 and collide
    for shift in (0, 0, 5):
        assert torch.equal(noise.gumbel(rows, positions + shift, 2, 101), Noise(noise.keys).gumbel(rows, positions + shift, 2, 101))


def test_gumbel_noise_has_the_gumbel_distribution():
    g = Noise.from_generator(torch.Generator().manual_seed(0), 1).gumbel(torch.tensor([0]), torch.arange(200)[None], 1, 500)
    assert abs(g.mean().item() - 0.5772) < 0.01 and abs(g.std().item() - math.pi / math.sqrt(6)) < 0.01


def test_gumbel_max_draws_from_p():
    """argmax(log p + g) over 20,000 positions has the frequencies of p."""
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    noise = Noise.from_generator(torch.Generator().manual_seed(0), 1)
    scores = p.log().expand(1, 20_000, 1, 4)
    winners = noise.winners(scores, torch.tensor([0]), torch.arange(20_000)[None])
    freq = torch.bincount(winners.flatten(), minlength=4) / 20_000
    assert torch.allclose(freq, p, atol=0.012), freq


def test_winners_with_few_tokens_in_use_the_sparse_path_and_agree():
    noise = Noise.from_generator(torch.Generator().manual_seed(0), 2)
    scores = torch.randn(2, 5, 1, 64, generator=torch.Generator().manual_seed(2))
    kept = scores.masked_fill(scores < scores.topk(6, dim=-1).values[..., -1:], float("-inf"))  # 6 of 64 in: sparse
    rows, positions = torch.tensor([0, 1]), torch.arange(10).view(2, 5)
    dense = (kept.double() + noise.gumbel(rows, positions, 1, 64)).argmax(-1)
    assert torch.equal(noise.winners(kept, rows, positions), dense)
    assert torch.equal(noise.top(kept, rows, positions, 3)[..., 0], dense)


def test_keys_come_once_per_row_from_the_generator_or_a_list():
    keys = Noise.from_generator(torch.Generator().manual_seed(0), 3).keys
    listed = Noise.from_generator([torch.Generator().manual_seed(s) for s in (0, 0, 7)], 3).keys
    assert torch.equal(listed[0], keys[0]) and torch.equal(listed[0], listed[1]) and not torch.equal(listed[2], listed[0])
    with pytest.raises(ValueError, match="2 generators for a batch of 3"):
        Noise.from_generator([torch.Generator()] * 2, 3)
    with pytest.raises(ValueError, match="keys for 3 rows"):
        as_noise(Noise(keys), 2)


def test_residual_trials_are_per_slot():
    noise = Noise.from_generator(torch.Generator().manual_seed(0), 2)
    slots = SlotNoise(noise, torch.tensor([0, 1]), torch.tensor([[0, 1], [0, 1]]), torch.zeros(2, 2, dtype=torch.long))
    both = slots.trials(torch.tensor([[True, False], [False, True]]), 3, 4, 0)
    one = slots.trials(torch.tensor([[False, False], [False, True]]), 3, 8, 0)
    assert torch.equal(both[1], one[0, :, :4])  # a slot's trials do not depend on the other slots


@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=0.7, top_p=0.9), SamplingConfig(temperature=1.2, top_k=5),
                                      SamplingConfig(temperature=0)])
def test_draws_on_the_allowed_columns_equal_draws_on_the_vocabulary(sampling):
    """`keyed_scores` narrows the scores to the allowed tokens when they are few; the ranked
    draws (winner first) are the same tokens as over the whole vocabulary, and the noise
    kept per position (`gumbel_columns`) is `gumbel_at`'s, also for two positions of one
    call that share a place in the store."""
    g = torch.Generator().manual_seed(0)
    N, S, V = 3, 5, 64
    logits = torch.randn(N, S, 1, V, generator=g) * 3
    allowed = torch.rand(N, S, 1, V, generator=g) < 0.12
    allowed[..., 0] = True
    rows = torch.tensor([0, 1, 2])
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11], [5, 5 + COLUMN_SLOTS, 6, 7, 8]])
    noise = Noise(torch.tensor([[1, 2], [3, 4], [5, 6]]))
    dense = noise.top(transformed_scores(logits, sampling, allowed), rows, positions, 3, greedy=sampling.temperature == 0)
    scores, columns = keyed_scores(logits, sampling, allowed)
    assert columns is not None and columns.shape[-1] < V
    for _ in range(2):  # computed, then read back from the store
        compact = Noise(noise.keys) if _ == 0 else compact
        narrow = compact.top(scores, rows, positions, 3, greedy=sampling.temperature == 0, tokens=columns)
        finite = torch.isfinite(transformed_scores(logits, sampling, allowed)).sum(-1, keepdim=True) > torch.arange(3)
        assert torch.equal(narrow[finite], dense[finite])
    assert keyed_scores(logits, sampling, torch.ones_like(allowed))[1] is None  # most of the vocabulary: no narrowing
