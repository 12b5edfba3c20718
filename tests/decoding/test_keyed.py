"""The randomness contract, stated as tests at temperature 1: the same seed gives AR's
tokens whatever the keyed method, window, drafts, branches, choices, batch mates, batch
order and thread count; SJD and MC-SJD no longer depend on batch mates or batch order."""

from dataclasses import replace

import pytest
import torch

from mmspec.core.rules import GSDRule
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from tests.decoding.helpers import FickleChooser, tiny_model

SAMPLING = SamplingConfig(guidance_scale=2.0)  # temperature 1: every token is a draw
LABELS = torch.tensor([0, 1, 2, 1])
KEYED = [
    DecodingConfig(method="keyed", window=2),
    DecodingConfig(method="keyed", window=8, init="above"),
    DecodingConfig(method="keyed", window=16, init="lookup"),
    DecodingConfig(method="keyed", window=5, branches=3, branch_slots=2, branch_length=2),
    DecodingConfig(method="auto", cost="off"),
    DecodingConfig(method="auto", branches=2, branch_slots=2, branch_length=1, chooser=FickleChooser, cost="off"),
]


def seeds(*values):
    return [torch.Generator().manual_seed(v) for v in values]


@pytest.fixture(scope="module")
def model():
    return tiny_model(vocab_size=16, block_size=16, seed=3)


@pytest.fixture(scope="module")
def ar(model):
    return generate(model, LABELS, "ar", SAMPLING, seeds(0, 1, 2, 3))[0]


@pytest.mark.parametrize("config", KEYED, ids=lambda c: c.describe())
def test_every_keyed_method_returns_ar_tokens(model, ar, config):
    tokens, stats = generate(model, LABELS, config, SAMPLING, seeds(0, 1, 2, 3))
    assert torch.equal(tokens, ar)
    assert stats.forward_passes < 16


def test_a_row_decoded_alone_with_its_generator_equals_its_row_in_the_batch(model, ar):
    for i in range(len(LABELS)):
        alone, _ = generate(model, LABELS[i:i + 1], "auto", SAMPLING, seeds(i))
        assert torch.equal(alone[0], ar[i])


def test_batch_order_does_not_matter(model, ar):
    order = torch.tensor([3, 1, 0, 2])
    tokens, _ = generate(model, LABELS[order], DecodingConfig(method="keyed", window=4), SAMPLING, seeds(*order.tolist()))
    assert torch.equal(tokens, ar[order])


def test_thread_count_does_not_matter(model, ar):
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one, _ = generate(model, LABELS, "auto", SAMPLING, seeds(0, 1, 2, 3))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, ar)


def test_auto_on_its_measured_curve_repeats_itself_and_ar(model, tmp_path, monkeypatch):
    """The default, with the cost curve it measures (choices that follow this machine's
    seconds), gives the same tokens on every run: AR's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    labels = torch.tensor([0, 1])
    ar, _ = generate(model, labels, "ar", SAMPLING, torch.Generator().manual_seed(5))
    for _ in range(3):
        tokens, stats = generate(model, labels, "auto", SAMPLING, torch.Generator().manual_seed(5))
        assert torch.equal(tokens, ar) and stats.cost_curve is not None


@pytest.mark.parametrize("name", ["keyed", "auto", "sjd", "mc-sjd", "zipar+mc-sjd", "sjd+above"])
def test_a_batch_mate_that_stops_changes_nothing(model, name):
    """Classes 0 and 2 with a stop token that only the first sequence emits: the second
    sequence is what it is decoded alone with its own generator, for 6 seeds."""
    config = DecodingConfig.from_name(name, window=4, cost="off")
    stops_seen = 0
    for seed in range(6):
        first, _ = generate(model, torch.tensor([0]), "ar", SAMPLING, seeds(seed))
        second, _ = generate(model, torch.tensor([2]), "ar", SAMPLING, seeds(100 + seed))
        only_first = [t for t in first[0, 1:].tolist() if t not in second[0].tolist()]
        stop = only_first[0] if only_first else 15
        both, _ = generate(model, torch.tensor([0, 2]), config, SAMPLING, seeds(seed, 100 + seed), stop_tokens=[stop])
        alone, _ = generate(model, torch.tensor([2]), config, SAMPLING, seeds(100 + seed), stop_tokens=[stop])
        assert torch.equal(both[1], alone[0]), (seed, stop)
        stops_seen += int((both[0] == stop).any() and (both[0] == stop).nonzero()[0] < 15)
    assert stops_seen >= 3  # the first sequence did stop early


def test_sjd_and_mc_sjd_do_not_depend_on_batch_order(model):
    order = torch.tensor([2, 0, 3, 1])
    for name in ("sjd", "mc-sjd"):
        tokens, _ = generate(model, LABELS, name, SAMPLING, seeds(0, 1, 2, 3))
        swapped, _ = generate(model, LABELS[order], name, SAMPLING, seeds(*order.tolist()))
        assert torch.equal(swapped, tokens[order]), name


def test_the_same_seed_differs_between_sjd_windows_but_not_keyed_windows(model, ar):
    """SJD samples p too, but its tokens follow its window; the keyed family's do not."""
    sjd = [generate(model, LABELS, DecodingConfig(method="sjd", window=w), SAMPLING, seeds(0, 1, 2, 3))[0] for w in (2, 8)]
    keyed = [generate(model, LABELS, DecodingConfig(method="keyed", window=w), SAMPLING, seeds(0, 1, 2, 3))[0] for w in (2, 8)]
    assert not torch.equal(sjd[0], sjd[1])
    assert torch.equal(keyed[0], ar) and torch.equal(keyed[1], ar)


def test_keyed_refuses_relaxed_rules():
    with pytest.raises(ValueError, match="unknown decoding 'keyed\\+gsd'"):
        DecodingConfig.from_name("keyed+gsd")
    with pytest.raises(ValueError, match="use mc-sjd\\+gsd"):
        DecodingConfig(method="keyed", rule=GSDRule())


@pytest.mark.parametrize("name", ["auto+lantern", "zipar+auto"])
def test_auto_with_a_relaxed_rule_or_inexact_schedule_fixes_its_choices_and_repeats_itself(model, name):
    config = DecodingConfig.from_name(name, zipar_window=2)
    assert not config.chooses and config.keyed == (name == "zipar+auto")
    layout = replace(model.layout(), token_embeddings=torch.randn(16, 4, generator=torch.Generator().manual_seed(0)))
    runs = [generate(model, LABELS, config, SAMPLING, seeds(0, 1, 2, 3), layout=layout) for _ in range(2)]
    assert torch.equal(runs[0][0], runs[1][0]) and runs[0][1].choices is None
