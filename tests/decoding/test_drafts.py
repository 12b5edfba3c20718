import pytest
import torch

from mmspec.core.layout import TokenLayout
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.drafts import Copy, DraftContext, FirstOf, Hints, Lookup, Random, drafter_from_name, first_drafts
from mmspec.decoding.generate import generate
from mmspec.metrics.losslessness import all_sequences, chi_square, sequence_counts, sequence_probs
from tests.decoding.helpers import tiny_model

SAMPLING = SamplingConfig(guidance_scale=2.0, top_k=3)
N_SAMPLES = 40_000  # as test_jacobi: rejects a 5% bias on sequence probabilities


def context(history, prompt=None, length=None):
    layout = TokenLayout.grid((length or history.shape[1],), 10)
    return DraftContext(layout, history[..., None], None if prompt is None else prompt[..., None])


def test_lookup_proposes_what_followed_the_latest_match():
    #                 0  1  2  3  4  5  6  7
    history = torch.tensor([[5, 6, 7, 5, 6, 8, 5, 6, -1, -1]])
    out = Lookup(max_ngram=2).propose(context(history), torch.tensor([8]), torch.zeros(1, 1), None)
    assert out.tolist() == [[8]]  # "5 6" last seen at 3-4, followed by 8 (not 7)


def test_lookup_searches_the_prompt_and_says_when_it_finds_nothing():
    prompt = torch.tensor([[-1, 3, 4, 9]])  # left padded
    history = torch.tensor([[3, 4, -1, -1], [1, 2, -1, -1]])
    ctx = context(history, prompt.expand(2, -1))
    out = Lookup(max_ngram=2).propose(ctx, torch.tensor([2, 2]), torch.zeros(2, 1), None)
    assert out.tolist() == [[9], [-1]]


def test_phrase_lookup_takes_the_first_match_and_skips_a_substituted_word():
    #                       0  1  2  3  4  5  6  7  8
    history = torch.tensor([[5, 6, 7, 5, 6, 8, 5, 6, -1, -1]])
    phrase = drafter_from_name("phrase-lookup", fill=False)
    assert phrase == Lookup(first=True, substitutions=True) and phrase.name == "phrase-lookup"
    # "5 6" first at 0-1 (followed by 7), but 3-4 also matches the 6 before them: 3 of 4 tokens beat 2
    assert phrase.propose(context(history), torch.tensor([8]), torch.zeros(1, 1), None).tolist() == [[8]]
    history = torch.tensor([[5, 6, 7, 1, 5, 6, 8, 5, 6, -1]])  # no near match: the first "5 6" wins
    assert phrase.propose(context(history), torch.tensor([9]), torch.zeros(1, 1), None).tolist() == [[7]]
    # "1 2 3 4" seen; "1 2 9" written: no n-gram ends in 9, so "1 2" is matched and the token after 3 drafted
    history = torch.tensor([[1, 2, 3, 4, 1, 2, 9, -1]])
    assert phrase.propose(context(history), torch.tensor([7]), torch.zeros(1, 1), None).tolist() == [[4]]
    assert Lookup().propose(context(history), torch.tensor([7]), torch.zeros(1, 1), None).tolist() == [[-1]]
    # "so the circle is easy" seen, "so the star is" written: "the _ is" (2 of 3) beats the latest "is"
    so, the, circle, is_, easy, it, star = range(7)
    history = torch.tensor([[so, the, circle, is_, easy, it, is_, so, the, star, is_, -1]])
    assert phrase.propose(context(history), torch.tensor([11]), torch.zeros(1, 1), None).tolist() == [[easy]]


U5 = torch.full((1, 5, 1), 0.5, dtype=torch.float64)  # uniforms of a random proposal (unused by copies and lookup)


def test_first_of_takes_the_first_proposal_and_random_fills_the_rest():
    history = torch.tensor([[2, 3, 2, -1]])
    layout = TokenLayout.grid((2, 2), 10)
    drafter = drafter_from_name("lookup+above")
    assert isinstance(drafter, FirstOf) and drafter.name == "lookup+above"
    assert drafter.drafters == (Lookup(), Copy("row"), Random())
    out = first_drafts(drafter, history[..., None].clone(), torch.tensor([[3]]), layout, None, torch.rand(1, 1, 1, dtype=torch.float64))
    assert out.tolist() == [[[3]]]  # lookup: "2" was followed by 3
    out = first_drafts(Copy("row"), torch.tensor([[4, 5, -1, -1]])[..., None], torch.tensor([[2, 3]]), layout, None, U5[:, :2])
    assert out[..., 0].tolist() == [[4, 5]]


def test_phrase_lookup_copies_a_run_and_takes_hints_while_in_step():
    """The prompt "a small red circle sits here ." and the text "a large": lookup copies
    the example's phrase after "a _"; the last forward saw that phrase and predicted the
    image's words, which replace lookup's while the window follows what it saw."""
    a, small, red, circle, sits, here, stop, large, green, square = range(10)
    layout = TokenLayout.grid((7,), 10)
    prompt = torch.tensor([[a, small, red, circle, sits, here, stop]])[..., None]
    history = torch.tensor([[a, large, -1, -1, -1, -1, -1]])[..., None]
    where = torch.tensor([[2, 3, 4, 5, 6]])
    lookup = Lookup(first=True, substitutions=True)
    plain = first_drafts(lookup, history.clone(), where, layout, prompt, U5)
    assert plain[..., 0].tolist() == [[red, circle, sits, here, stop]]
    fed = torch.tensor([[red, circle, sits, here, stop]])[..., None]
    predicted = torch.tensor([[green, square, sits, here, -1]])[..., None]  # no prediction past the last forward
    start = torch.tensor([True, False, False, False, False])
    hinted = first_drafts(lookup, history.clone(), where, layout, prompt, U5, Hints(predicted, fed, start))
    assert hinted[..., 0].tolist() == [[green, square, sits, here, stop]]
    # the last forward saw a shifted text (a word was inserted since): lookup alone
    shifted = torch.tensor([[circle, sits, here, stop, -1]])[..., None]
    out = first_drafts(lookup, history.clone(), where, layout, prompt, U5, Hints(predicted, shifted, start))
    assert out[..., 0].tolist() == [[red, circle, sits, here, stop]]


def test_lookup_copies_from_its_reference_texts_first():
    prompt = torch.tensor([[1, 2, 3]])
    history = torch.tensor([[7, 8, -1, -1]])
    plain = Lookup(first=True).propose(context(history, prompt), torch.tensor([2]), torch.zeros(1, 1), None)
    assert plain.tolist() == [[-1]]  # "7 8" is in neither the prompt nor the text
    with_reference = Lookup(first=True, reference=(4, 5, -1, 7, 8, 9, 6))
    assert with_reference.propose(context(history, prompt), torch.tensor([2]), torch.zeros(1, 1), None).tolist() == [[9]]


def test_unknown_drafter_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown draft init 'nearest'"):
        DecodingConfig.from_name("sjd", init="nearest")


@pytest.fixture(scope="module")
def exact_distribution():
    model = tiny_model()
    seqs = all_sequences(4, 4)
    return model, sequence_probs(model, torch.full((len(seqs),), 1), seqs, SAMPLING)


@pytest.mark.statistical
@pytest.mark.parametrize("method", ["sjd", "mc-sjd"])
@pytest.mark.parametrize("init", ["lookup", "lookup+above"])
def test_lookup_drafts_are_lossless(exact_distribution, method, init):
    model, probs = exact_distribution
    config = DecodingConfig(method=method, window=3, init=init)
    tokens, _ = generate(model, torch.full((N_SAMPLES,), 1), decoding=config, sampling=SAMPLING,
                         generator=torch.Generator().manual_seed(11))
    assert chi_square(sequence_counts(tokens, 4), probs).p_value > 1e-3


def video_layout():
    return TokenLayout.grid((2, 2, 2), 2)  # frame, row, col


@pytest.mark.statistical
@pytest.mark.parametrize("method", ["sjd", "mc-sjd"])
def test_previous_frame_drafts_on_a_three_axis_layout_are_lossless(method):
    """Raster order over (frame, row, col), first drafts copied from the previous frame:
    all 256 sequences of 8 binary tokens against their exact probabilities."""
    model = tiny_model(vocab_size=2, block_size=16, seed=2)  # 8 of its 16 positions
    sampling = SamplingConfig(temperature=0.8)  # without CFG: half the rows
    seqs = all_sequences(2, 8)
    probs = sequence_probs(model, torch.full((len(seqs),), 1), seqs, sampling)
    config = DecodingConfig(method=method, window=4, init="previous-frame")
    tokens, _ = generate(model, torch.full((N_SAMPLES,), 1), decoding=config, sampling=sampling, layout=video_layout(),
                         generator=torch.Generator().manual_seed(5))
    assert chi_square(sequence_counts(tokens, 2), probs).p_value > 1e-3


@pytest.mark.parametrize("init", ["lookup", "lookup+above", "lookup+left", "previous-frame", "previous-frame+lookup"])
@pytest.mark.parametrize("name", ["sjd", "mc-sjd", "zipar+mc-sjd"])
def test_greedy_with_every_drafter_is_ar(init, name):
    model = tiny_model(vocab_size=16, block_size=16)
    layout = TokenLayout.grid((2, 2, 4), 16)
    sampling = SamplingConfig(guidance_scale=3.0, temperature=0)
    labels = torch.tensor([0, 1, 2])
    config = DecodingConfig.from_name(name, window=4, zipar_window=2, init=init)
    tokens, _ = generate(model, labels, decoding=config, sampling=sampling, layout=layout, generator=torch.Generator().manual_seed(0))
    if config.exact:
        ar, _ = generate(model, labels, decoding="ar", sampling=sampling, layout=layout)
        assert torch.equal(tokens, ar)
    else:  # ZipAR's context (a stand-in for the row above) follows when rows commit, so its
        # tokens follow the drafts too (seen at commit 581dc76 with random drafts): the same seed repeats them
        again, _ = generate(model, labels, decoding=config, sampling=sampling, layout=layout, generator=torch.Generator().manual_seed(0))
        assert torch.equal(tokens, again)
