"""mmspec's Cosmos-Predict1 AR network against the original code's outputs (fixtures/cosmos).

`tests/fixtures/cosmos/make_fixture.py` ran the original `Transformer` (cosmos-predict1's
own modules, on CPU) for two tiny configs, `tiny` (3-D RoPE) and `tiny_yarn` (with YaRN),
and saved its weights as its `state_dict()`, its logits over random videos, its RoPE table,
and the greedy tokens of its `prefill` + `decode_n_tokens` after 1 and 2 conditioning
latent frames.
"""

import json
import shutil

import pytest
import torch

from mmspec import DecodingConfig, SamplingConfig, generate
from mmspec.models.networks.cosmos import CosmosAR, CosmosARConfig, load_cosmos_checkpoint
from tests.helpers import FIXTURES

ROOT = FIXTURES / "cosmos"
VARIANTS = ["tiny", "tiny_yarn"]
METHODS = ["ar", "sjd", "mc-sjd", "keyed", "auto", DecodingConfig.from_name("mc-sjd", branches=2)]


@pytest.fixture(scope="module", params=VARIANTS)
def cosmos(request):
    folder = ROOT / request.param
    return load_cosmos_checkpoint(folder), torch.load(folder / "reference.pt", weights_only=True)


def test_fixture_is_small_and_loads_without_code():
    files = [p for p in ROOT.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 1_000_000
    for variant in VARIANTS:
        torch.load(ROOT / variant / "model.pt", weights_only=True)


def test_teacher_forced_logits_match_original_within_1e5(cosmos):
    model, ref = cosmos
    with torch.no_grad():
        logits = model(ref["tokens"])
    torch.testing.assert_close(logits, ref["logits"], atol=1e-5, rtol=0)


def test_rope_table_is_the_original_s(cosmos):
    model, ref = cosmos
    cos, sin = model.rope("cpu")
    assert torch.equal(cos, ref["cos"]) and torch.equal(sin, ref["sin"])


@pytest.mark.parametrize("frames", [1, 2])
def test_generated_positions_turn_at_the_full_video_s_rope_rows(cosmos, frames):
    """After k conditioning frames, generated position p is video position k*H*W + p: the
    cached logits of teacher-forced tokens equal the whole-video forward's."""
    model, ref = cosmos
    model.condition_frames = frames
    try:
        P = model.prefix_len
        tokens = ref["tokens"]
        session = model.start(tokens[:, :P], guided=False)
        n = tokens.shape[1] - P
        positions = torch.arange(n - 1).expand(2, -1)
        out = session.forward(tokens[:, P:-1], positions)
        cached = torch.cat([session.prefill_logits().cond, out.cond], dim=1)
        torch.testing.assert_close(cached, ref["logits"][:, P - 1 : -1], atol=1e-5, rtol=0)
    finally:
        model.condition_frames = 1


@pytest.mark.parametrize("decoding", METHODS, ids=lambda d: d if isinstance(d, str) else d.describe())
@pytest.mark.parametrize("frames", [1, 2])
def test_greedy_tokens_are_the_original_s_for_every_exact_method(cosmos, decoding, frames):
    model, ref = cosmos
    model.condition_frames = frames
    try:
        assert model.layout().shape == (3 - frames, 4, 4) and model.layout().axes == ("frame", "row", "col")
        tokens, _ = generate(model, ref[f"condition_{frames}"], decoding, SamplingConfig(temperature=0.0),
                             torch.Generator().manual_seed(0))
        assert torch.equal(tokens, ref[f"greedy_{frames}"])
    finally:
        model.condition_frames = 1


@pytest.mark.parametrize("seed", [0, 1])
def test_sampled_auto_returns_ar_s_tokens_at_cosmos_defaults(cosmos, seed):
    """Temperature 1.0 and top-p 0.8, the base models' sampling defaults."""
    model, ref = cosmos
    sampling = SamplingConfig(temperature=1.0, top_p=0.8)
    ar, _ = generate(model, ref["condition_1"], "ar", sampling, torch.Generator().manual_seed(seed))
    auto, _ = generate(model, ref["condition_1"], "auto", sampling, torch.Generator().manual_seed(seed))
    assert torch.equal(auto, ar)


def test_presets_have_the_released_shapes():
    small, large = CosmosARConfig.from_name("4B"), CosmosARConfig.from_name("12B")
    assert (small.dim, small.n_layers, small.rotary_dim, small.n_kv_heads, small.ffn_hidden_size) == (4096, 16, 128, 8, 14336)
    assert (large.dim, large.n_layers, large.rotary_dim, large.apply_yarn) == (5120, 40, 128, True)
    assert small.latent_shape == [5, 40, 64] and small.vocab_size == 64000 and not small.apply_yarn
    # about 4.0e9 and 12e9 weights, as the names say
    assert 3.9e9 < small.weight_count() < 4.3e9 and 11.5e9 < large.weight_count() < 12.5e9


def test_wrong_calls_are_one_line_errors(cosmos):
    model, ref = cosmos
    with pytest.raises(ValueError, match="no classifier-free guidance"):
        model.start(ref["condition_1"], guided=True)
    with pytest.raises(ValueError, match=r"condition must be integer tokens \[B, 16\]"):
        model.start(ref["condition_2"], guided=False)
    with pytest.raises(ValueError, match=r"condition tokens must lie in \[0, 96\)"):
        model.start(ref["condition_1"] + 96, guided=False)
    with pytest.raises(ValueError, match=r"condition_frames must be in \[1, 3\)"):
        CosmosAR(model.config, condition_frames=3)


def test_load_errors_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_cosmos_checkpoint(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="has no model.pt"):
        load_cosmos_checkpoint(tmp_path)
    folder = tmp_path / "no_config"
    folder.mkdir()
    shutil.copy(ROOT / "tiny" / "model.pt", folder / "model.pt")
    with pytest.raises(ValueError, match="has no config.json; pass config="):
        load_cosmos_checkpoint(folder)
    # the weights of one config do not load into another: named keys and shapes, one line
    config = json.loads((ROOT / "tiny" / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "n_layers": 3, "vocab_size": 100}))
    with pytest.raises(ValueError, match=r"does not fit the config: missing keys: layers\.2\..*shape mismatch") as err:
        load_cosmos_checkpoint(folder)
    assert "\n" not in str(err.value)
    (folder / "config.json").write_text(json.dumps({**config, "use_qk_normalization": False}))
    with pytest.raises(ValueError, match=r"unexpected keys: layers\.0\.attention\.q_norm\.weight"):
        load_cosmos_checkpoint(folder)
    (folder / "config.json").write_text(json.dumps({**config, "n_heads": "4"}))
    with pytest.raises(ValueError, match="field 'n_heads' must be a whole number"):
        load_cosmos_checkpoint(folder)


def test_original_key_processing_is_applied(tmp_path):
    """A `model.`-prefixed state dict with TransformerEngine `_extra_state` entries loads,
    as the original's `process_state_dict(prefix_to_remove="model.")` lets it."""
    weights = torch.load(ROOT / "tiny" / "model.pt", weights_only=True)
    prefixed = {f"model.{k}": v for k, v in weights.items()}
    prefixed["model.layers.0.attention.wq._extra_state"] = torch.zeros(1)
    torch.save({"model": prefixed}, tmp_path / "model.pt")
    shutil.copy(ROOT / "tiny" / "config.json", tmp_path / "config.json")
    model = load_cosmos_checkpoint(tmp_path)
    assert torch.equal(model.output.weight, weights["output.weight"])


def test_a_hub_placeholder_config_picks_the_preset_the_weights_have(tmp_path):
    """The Hub folders hold `model.pt` beside a `config.json` that may name no field; the
    preset is then the one with the weights' width and depth (here none: one-line error)."""
    shutil.copy(ROOT / "tiny" / "model.pt", tmp_path / "model.pt")
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["CosmosAR"]}))
    with pytest.raises(ValueError, match=r"names no config fields and the weights \(dim 64, 2 layers\) are no preset's"):
        load_cosmos_checkpoint(tmp_path)
    config = CosmosARConfig.from_dict(json.loads((ROOT / "tiny" / "config.json").read_text()))
    assert load_cosmos_checkpoint(tmp_path, config).config == config


def test_preset_of_reads_width_and_depth():
    from mmspec.models.networks.cosmos import preset_of

    def shapes(dim, layers):
        return {"tok_embeddings.weight": torch.empty(0, dim), **{f"layers.{i}.ffn_norm.weight": torch.empty(0) for i in range(layers)}}

    assert preset_of(shapes(4096, 16), "x") == CosmosARConfig.from_name("4B")
    assert preset_of(shapes(5120, 40), "x") == CosmosARConfig.from_name("12B")


@pytest.mark.statistical
@pytest.mark.parametrize("decoding", [
    DecodingConfig("mc-sjd", window=3, init="previous-frame"),
    DecodingConfig("sjd", window=4, branches=2, branch_slots=2, branch_length=1),
], ids=lambda d: d.describe())
def test_exact_methods_sample_a_tiny_cosmos_distribution(decoding):
    """Every continuation of a Cosmos config with 3 latent frames of 1 x 2 tokens (V = 4; one
    frame given, 256 continuations, of which top-p keeps most) at the original's sampling
    (temperature 1, top-p 0.8), from 20,000 draws, matches the exact product of conditionals:
    chi-square at a fixed seed. (Sampled auto gives AR's tokens: tests/pipelines.)"""
    from mmspec.metrics.losslessness import all_sequences, chi_square, sequence_counts, sequence_probs

    torch.manual_seed(2)
    model = CosmosAR(CosmosARConfig(dim=32, n_layers=1, n_heads=2, n_kv_heads=1, ffn_hidden_size=48, vocab_size=4,
                                    latent_shape=[3, 1, 2])).eval()
    sampling = SamplingConfig(temperature=1.0, top_p=0.8)
    sequences = all_sequences(4, 4)
    probs = sequence_probs(model, torch.tensor([[1, 3]]).expand(len(sequences), -1), sequences, sampling)
    assert probs.max() > 30 * probs[probs > 0].min() and (probs > 0).sum() > 50  # far from uniform, top-p cuts some
    n = 20_000
    tokens, _ = generate(model, torch.tensor([[1, 3]]).expand(n, -1), decoding=decoding, sampling=sampling,
                         generator=torch.Generator().manual_seed(7))
    result = chi_square(sequence_counts(tokens, 4), probs)
    assert result.p_value > 1e-3, result
