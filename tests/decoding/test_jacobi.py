from dataclasses import replace

import pytest
import torch

from mmspec.decoding.config import DECODINGS, DecodingConfig
from mmspec.core.layout import TokenLayout
from mmspec.decoding.generate import generate
from mmspec.core.sampling import SamplingConfig
from mmspec.metrics.losslessness import chi_square
from tests.decoding.helpers import tiny_model
from tests.helpers import exact
from tests.helpers.layouts import eol_layout

SAMPLING = exact.EXACT_SAMPLING


@pytest.fixture(scope="module")
def exact_distribution():
    return exact.exact_distribution()


@pytest.mark.statistical
@pytest.mark.parametrize(
    "config",
    [
        DecodingConfig(method="sjd", window=2),
        DecodingConfig(method="sjd", window=3, init="left"),
        DecodingConfig(method="mc-sjd", window=2),
        DecodingConfig(method="mc-sjd", window=3, init="above"),
    ],
    ids=lambda c: f"{c.name}-L{c.window}-{c.init}",
)
def test_sjd_and_mc_sjd_are_lossless(exact_distribution, config):
    """Whole 4-token sequences (V=4, CFG 2, top-k 3) from 40,000 draws match the exact
    product of conditionals: chi-square at a fixed seed."""
    model, layout, probs = exact_distribution
    result = chi_square(exact.sample_counts(model, layout, config, seed=11), probs)
    assert result.p_value > 1e-3, result


@pytest.mark.statistical
@pytest.mark.parametrize(
    "name,params",
    [("sjd+lantern", dict(lantern_k=2, lantern_delta=0.3)), ("mc-sjd+gsd", dict(gsd_prob_gap=0.5, gsd_embed_dist=10.0))],
)
def test_relaxed_rules_are_not_exact(exact_distribution, name, params):
    """LANTERN and GSD change the distribution by design; the same test shows it."""
    model, layout, probs = exact_distribution
    config = DecodingConfig.from_name(name, window=3, **params)
    assert not config.exact
    assert chi_square(exact.sample_counts(model, layout, config, seed=11), probs).p_value < 1e-6


@pytest.mark.parametrize("window", [1, 4, 16, 64])
@pytest.mark.parametrize("guidance", [1.0, 3.0])
@pytest.mark.parametrize("name", ["sjd", "mc-sjd", "sjd+gsd", "mc-sjd+lantern"])
def test_greedy_jacobi_reproduces_ar(name, window, guidance):
    """At temperature 0, SJD is Jacobi decoding: the output is AR's greedy output. The
    relaxed rules too: a one-hot p gives a group or neighbourhood no extra mass."""
    model = tiny_model(vocab_size=16, block_size=16)
    layout = replace(model.layout(), token_embeddings=torch.randn(16, 3, generator=torch.Generator().manual_seed(1)))
    sampling = SamplingConfig(guidance_scale=guidance, temperature=0)
    labels = torch.tensor([0, 1, 2])
    ar, _ = generate(model, labels, decoding="ar", sampling=sampling)
    config = DecodingConfig.from_name(name, window=window, lantern_k=3)
    tokens, stats = generate(model, labels, decoding=config, sampling=sampling, layout=layout,
                             generator=torch.Generator().manual_seed(0))
    assert torch.equal(tokens, ar)
    assert stats.forward_passes <= 16


@pytest.mark.parametrize("name", DECODINGS)
def test_same_seed_same_tokens_for_every_method(name):
    model = tiny_model(vocab_size=16, block_size=16)
    layout = replace(model.layout(), token_embeddings=torch.randn(16, 3, generator=torch.Generator().manual_seed(1)))
    # auto on its measured cost curve too: its choices follow this machine's seconds, its tokens do not
    config = DecodingConfig.from_name(name, window=4 if "keyed" in name or "auto" not in name else None, zipar_window=2, lantern_k=3)
    run = lambda seed: generate(model, torch.tensor([0, 2]), decoding=config, sampling=SAMPLING, layout=layout,
                                generator=torch.Generator().manual_seed(seed))[0]
    first = run(3)
    assert torch.equal(first, run(3))
    assert ((first >= 0) & (first < 16)).all()


def test_sequences_advance_by_their_own_accepted_length():
    """Three copies of one condition draw different first drafts, so they accept at
    different rates; each finishes after its own number of forwards (under a lock-step
    batch, which commits the shortest acceptance, all three would be equal)."""
    model = tiny_model(vocab_size=16, block_size=16, seed=3)
    sampling = SamplingConfig(temperature=0)
    labels = torch.tensor([1, 1, 1])
    ar, _ = generate(model, labels, decoding="ar", sampling=sampling)
    tokens, stats = generate(model, labels, decoding="sjd", sampling=sampling, generator=torch.Generator().manual_seed(0))
    per_sample = stats.forward_passes_per_sample.tolist()
    assert len(set(per_sample)) > 1, per_sample
    assert stats.forward_passes == max(per_sample)
    assert torch.equal(tokens, ar)


@pytest.mark.parametrize("name", ["ar", "sjd", "mc-sjd", "zipar", "zipar+mc-sjd", "zipar+sjd"])
@pytest.mark.parametrize("init", ["random", "left", "above"])
def test_forced_layout_is_respected_by_every_method(name, init):
    model = tiny_model(vocab_size=16, block_size=16)
    layout = eol_layout()
    config = DecodingConfig.from_name(name, window=5, zipar_window=2, init=init)
    tokens, _ = generate(model, torch.tensor([0, 1, 2, 0]), decoding=config, sampling=SamplingConfig(top_k=8),
                         layout=layout, generator=torch.Generator().manual_seed(0))
    grid = tokens.view(4, 4, 4)
    assert (grid[..., 3] == 15).all()
    assert (grid[..., :3] != 15).all()


def test_zipar_opens_a_row_every_window_tokens():
    """Rows of a 4x4 grid with ZipAR window 2: row r opens at forward 2r and takes 3 more:
    1 + 2*3 + 3 = 10 forwards instead of 16."""
    model = tiny_model(vocab_size=16, block_size=16)
    _, stats = generate(model, torch.tensor([1]), decoding=DecodingConfig.from_name("zipar", zipar_window=2),
                        sampling=SAMPLING, generator=torch.Generator().manual_seed(0))
    assert stats.forward_passes == 10
    assert stats.commit_iteration.view(4, 4)[:, 0].tolist() == [0, 2, 4, 6]
    assert not stats.exact


def test_zipar_needs_a_grid():
    model = tiny_model(vocab_size=16, block_size=16)
    flat = TokenLayout.grid((16,), 16)
    with pytest.raises(ValueError, match="has axes .*not .row."):
        generate(model, torch.tensor([0]), decoding="zipar+sjd", layout=flat)


def test_relaxed_rule_without_embeddings_is_a_clear_error():
    model = tiny_model(vocab_size=16, block_size=16)
    with pytest.raises(ValueError, match="GSD needs token embeddings"):
        generate(model, torch.tensor([0]), decoding="mc-sjd+gsd")
