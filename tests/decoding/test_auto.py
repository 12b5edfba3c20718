"""decoding="auto": the cost curve and its cache, the acceptance model, the choice, and
losslessness whatever the choices."""

import json
from dataclasses import replace

import pytest
import torch

from mmspec.core.device import device_profile
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.auto import cost_curve
from mmspec.decoding.auto.acceptance import AcceptanceModel, RunAcceptance
from mmspec.decoding.auto.chooser import AutoContext, Choice, CostChooser
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.auto.cost_curve import CostCurve, cost_key
from mmspec.decoding.generate import generate
from mmspec.metrics.losslessness import all_sequences, chi_square, sequence_counts, sequence_probs
from tests.decoding.helpers import FickleChooser, tiny_model

SAMPLING = SamplingConfig(guidance_scale=2.0, top_k=3)
N_SAMPLES = 40_000  # rejects a +-5% bias on sequence probabilities at p < 1e-3 (see test_ar)


@pytest.mark.statistical
def test_auto_is_lossless_with_a_chooser_that_changes_its_mind_every_forward():
    """Whole 4-token sequences (V=4, CFG 2, top-k 3) from 40,000 draws, the window (0 or 2),
    branches (on, off) and first drafts (above, random) changing at every forward by a
    counter and the tokens the last forward committed: chi-square at a fixed seed. A choice
    that looked at the forward's own uniforms, or drafts kept with a wrong q, would fail."""
    model = tiny_model()
    layout = model.layout()
    probs = sequence_probs(model, torch.full((len(all_sequences(4, 4)),), 1), all_sequences(4, 4), SAMPLING)
    config = DecodingConfig(method="auto", branches=2, branch_slots=2, branch_length=1, chooser=FickleChooser, cost="off")
    tokens, stats = generate(model, torch.full((N_SAMPLES,), 1), config, SAMPLING, torch.Generator().manual_seed(11), layout=layout)
    assert all(len(stats.choices[part]) == 2 for part in ("windows", "branches", "drafters")), stats.choices
    result = chi_square(sequence_counts(tokens, 4), probs)
    assert result.p_value > 1e-3, result


@pytest.mark.statistical
def test_auto_with_cost_chooser_is_lossless():
    """The same test with auto's own chooser on a steep made-up cost curve (so it moves
    between AR steps and windows)."""
    model = tiny_model()
    probs = sequence_probs(model, torch.full((len(all_sequences(4, 4)),), 1), all_sequences(4, 4), SAMPLING)
    tokens, stats = generate(model, torch.full((N_SAMPLES,), 1), DecodingConfig(method="auto", cost="off"), SAMPLING,
                             torch.Generator().manual_seed(12))
    assert chi_square(sequence_counts(tokens, 4), probs).p_value > 1e-3


@pytest.mark.statistical
def test_redrafting_auto_is_lossless_between_ar_steps():
    """auto redrafting every window with lookup (the captioner's auto), the chooser going
    from a window to an AR step and back at every forward (AR steps were refused under
    redrafting before): chi-square at a fixed seed."""
    model = tiny_model()
    probs = sequence_probs(model, torch.full((len(all_sequences(4, 4)),), 1), all_sequences(4, 4), SAMPLING)
    config = DecodingConfig(method="auto", init="lookup", redraft=True, chooser=FickleChooser, cost="off")
    tokens, stats = generate(model, torch.full((N_SAMPLES,), 1), config, SAMPLING, torch.Generator().manual_seed(13))
    assert set(stats.choices["windows"]) == {0, 2}, stats.choices
    assert chi_square(sequence_counts(tokens, 4), probs).p_value > 1e-3


@pytest.mark.parametrize("guidance", [1.0, 3.0])
def test_greedy_auto_reproduces_ar(guidance):
    model = tiny_model(vocab_size=16, block_size=16)
    greedy = SamplingConfig(guidance_scale=guidance, temperature=0.0)
    labels = torch.tensor([0, 1, 2])
    ar, _ = generate(model, labels, "ar", greedy)
    auto, stats = generate(model, labels, "auto", greedy, torch.Generator().manual_seed(0))
    assert torch.equal(ar, auto)
    assert stats.method == "auto" and stats.exact and stats.choices is not None


def test_a_cached_curve_from_a_loaded_machine_does_not_lock_auto_into_ar_steps(tmp_path, monkeypatch):
    """A file whose loop time would make every window lose (as one measured under a burst
    of load could) is read for its curve alone: the call measures its own loop time."""
    monkeypatch.setenv("MMSPEC_CACHE_DIR", str(tmp_path))
    model, labels = tiny_model(vocab_size=16, block_size=16), torch.tensor([0, 1])
    generate(model, labels, "auto", SAMPLING, torch.Generator().manual_seed(0))
    [path] = list((tmp_path / "cost").glob("*.json"))
    saved = json.loads(path.read_text())
    saved.update(seconds=[saved["seconds"][0]] * len(saved["seconds"]), glue_s=10.0, ar_glue_s=0.0)
    path.write_text(json.dumps(saved))
    _, stats = generate(model, labels, "auto", SAMPLING, torch.Generator().manual_seed(0))
    assert any(w > 0 for w in stats.choices["windows"]), stats.choices


def test_cost_curve_is_measured_once_then_read_and_refreshed_on_request(tmp_path, monkeypatch):
    monkeypatch.setenv("MMSPEC_CACHE_DIR", str(tmp_path))
    model, labels = tiny_model(vocab_size=16, block_size=16), torch.tensor([0, 1])
    measured = []
    measure = cost_curve.measure
    monkeypatch.setattr(cost_curve, "measure", lambda *a, **k: measured.append(1) or measure(*a, **k))
    _, stats = generate(model, labels, "auto", SAMPLING, torch.Generator().manual_seed(0))
    [path] = list((tmp_path / "cost").glob("*.json"))
    saved = json.loads(path.read_text())
    assert measured == [1] and saved["rows"] == 4  # 2 conditions x CFG
    assert "glue_s" not in saved  # the loop's own time is measured by each call
    assert sorted(stats.cost_curve) == saved["inputs"] and stats.cost_curve[1] == 1.0
    generate(model, labels, "auto", SAMPLING, torch.Generator().manual_seed(0))
    assert measured == [1]  # read from the cache
    generate(model, labels, DecodingConfig(method="auto", cost="refresh"), SAMPLING, torch.Generator().manual_seed(0))
    assert measured == [1, 1]
    _, off = generate(model, labels, DecodingConfig(method="auto", cost="off"), SAMPLING, torch.Generator().manual_seed(0))
    assert measured == [1, 1] and off.cost_curve == {1: 1.0}


def test_same_seed_gives_the_same_tokens_on_the_measured_curve(tmp_path, monkeypatch):
    """auto's choices follow the seconds this call measures; its tokens do not: they are
    AR's for the seed (keyed noise), run after run."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    model, labels = tiny_model(vocab_size=16, block_size=16), torch.tensor([0, 1])
    ar, _ = generate(model, labels, "ar", SAMPLING, torch.Generator().manual_seed(5))
    for _ in range(2):
        tokens, stats = generate(model, labels, "auto", SAMPLING, torch.Generator().manual_seed(5))
        assert torch.equal(tokens, ar) and stats.cost_curve is not None


def test_a_damaged_cost_file_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("MMSPEC_CACHE_DIR", str(tmp_path))
    model, labels = tiny_model(vocab_size=16, block_size=16), torch.tensor([0])
    generate(model, labels, "auto", SAMPLING, torch.Generator().manual_seed(0))
    [path] = list((tmp_path / "cost").glob("*.json"))
    path.write_text("{not json")
    generate(model, labels, "auto", SAMPLING, torch.Generator().manual_seed(0))
    assert json.loads(path.read_text())["inputs"][0] == 1


@pytest.mark.parametrize("bad", [float("nan"), 0.0, -1.0, "1"])
def test_a_cost_file_with_impossible_seconds_is_measured_again(tmp_path, monkeypatch, bad):
    """A cached curve with NaN, 0 or negative seconds broke every default run until deleted."""
    monkeypatch.setenv("MMSPEC_CACHE_DIR", str(tmp_path))
    model, labels = tiny_model(vocab_size=16, block_size=16), torch.tensor([0])
    ar, _ = generate(model, labels, "ar", SAMPLING, torch.Generator().manual_seed(0))
    generate(model, labels, "auto", SAMPLING, torch.Generator().manual_seed(0))
    [path] = list((tmp_path / "cost").glob("*.json"))
    data = json.loads(path.read_text())
    data["seconds"][1] = bad
    path.write_text(json.dumps(data))
    tokens, _ = generate(model, labels, "auto", SAMPLING, torch.Generator().manual_seed(0))
    assert torch.equal(tokens, ar)
    assert all(x > 0 for x in json.loads(path.read_text())["seconds"])


def test_cost_key_changes_with_model_rows_and_threads():
    model = tiny_model()
    key = cost_key(model, 2, device_profile("cpu"), torch.float32, 4)
    assert key != cost_key(model, 4, device_profile("cpu"), torch.float32, 4)
    assert key != cost_key(tiny_model(vocab_size=8), 2, device_profile("cpu"), torch.float32, 4)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert key != cost_key(model, 2, device_profile("cpu"), torch.float32, 4)
    finally:
        torch.set_num_threads(threads)


def test_cost_curve_interpolates_and_extends():
    curve = CostCurve([1, 5, 9], [1.0, 2.0, 4.0], rows=2)
    assert curve(1) == 1.0 and curve(3) == 1.5 and curve(7) == 3.0 and curve(13) == 6.0
    assert curve.relative() == {1: 1.0, 5: 2.0, 9: 4.0}


def chooser(cost: CostCurve, windows=(0, 2, 4, 8, 16, 32)) -> CostChooser:
    model = tiny_model()
    context = AutoContext(windows, (None,), (None,), cost, model.layout())
    return CostChooser(context, model.layout(), torch.device("cpu"))


def test_chooser_takes_long_windows_on_a_flat_curve_and_ar_steps_on_a_steep_one():
    assert chooser(CostCurve.flat(2)).choose(1).window == 32
    steep = chooser(CostCurve([1, 2], [1.0, 2.0], rows=2))  # every input costs a whole forward
    assert steep.choose(1).window == 0


def test_chooser_follows_what_the_decode_commits():
    """Windows that commit little make a middling curve prefer shorter ones."""
    middling = CostCurve([1, 5, 9, 17, 33], [1.0, 1.1, 1.25, 1.5, 2.0], rows=2)
    good, bad = chooser(middling), chooser(middling)
    for _ in range(20):
        good.observe(Choice(16), run_tokens=4 * 6.0, by_branches=0.0, forwards=4, glue_s=0.0)
        bad.observe(Choice(16), run_tokens=4 * 1.1, by_branches=0.0, forwards=4, glue_s=0.0)
    assert good.choose(1).window >= 16 > bad.choose(1).window


def test_acceptance_model_starts_at_its_prior_and_learns_one_scale():
    model = AcceptanceModel(scale=1.5)
    assert model.expected(16) == pytest.approx(2.5) and model.expected(0) == 1.0
    for _ in range(50):
        model.observe(4, None, run_tokens=3.0, by_branches=0.0, forwards=1)
    learned = 1 + 2.0 / model.shape(4)  # window 4 adds 2 tokens: window 16 adds 2 / f(4)
    assert abs(model.expected(16) - learned) < (learned - 2.5) / 4  # mostly the decode's, a little the prior's


def test_run_acceptance_learns_one_rate_per_slot():
    """A redrafting window: E[run length | w] = 1 + alpha + ... + alpha^w, alpha from the
    prior, then from accepted drafts over drafts tried (a window accepted to its end tried
    no rejected one)."""
    model = RunAcceptance(alpha=0.75, weight=4.0)
    assert model.expected(0) == 1.0 and model.expected(2) == pytest.approx(1 + 0.75 + 0.75 ** 2)
    for _ in range(50):  # windows of 8 that accept 3 drafts, then reject one
        model.observe(8, None, run_tokens=4.0, by_branches=0.0, forwards=1, rejections=1.0)
    assert model.expected(16) == pytest.approx(1 / (1 - 0.75), rel=0.02)  # 3 of 4 tried: alpha 0.75
    for _ in range(200):  # phrases copied to the window's end
        model.observe(8, None, run_tokens=9.0, by_branches=0.0, forwards=1, rejections=0.0)
    assert model.expected(16) > 12


def test_redrafting_chooser_counts_the_drafting_of_the_whole_window():
    """A redrafting loop drafts every slot at every forward: with a slot's drafting at a
    tenth of a forward, the window shrinks from 32 to a few slots even on a flat curve."""
    model = tiny_model()
    context = AutoContext((0, 2, 4, 8, 16, 32), (None,), (None,), CostCurve([1, 65], [1.0, 1.0], rows=2), model.layout(),
                          redraft=True)
    c = CostChooser(context, model.layout(), torch.device("cpu"))
    assert isinstance(c.acceptance, RunAcceptance) and c.choose(1).window == 32
    c.observe(Choice(32), run_tokens=4 * 4.0, by_branches=0.0, forwards=4, glue_s=0.0, draft_s=0.1, rejections=4.0)
    assert 0 < c.choose(1).window <= 4


def test_fixed_parts_stay_fixed_and_relaxed_rules_say_so():
    model = tiny_model(vocab_size=16, block_size=16)
    labels = torch.tensor([0, 1])
    _, stats = generate(model, labels, DecodingConfig(method="auto", window=3, init="above", cost="off"), SAMPLING,
                        torch.Generator().manual_seed(0))
    assert set(stats.choices["windows"]) <= {0, 3} and set(stats.choices["drafters"]) == {"above"}
    layout = replace(model.layout(), token_embeddings=torch.randn(16, 2, generator=torch.Generator().manual_seed(0)))
    _, relaxed = generate(model, labels, "auto+gsd", SAMPLING, torch.Generator().manual_seed(0), layout=layout)
    assert relaxed.method == "auto+gsd" and not relaxed.exact


def test_auto_names_and_errors():
    assert DecodingConfig.from_name("auto").name == "auto" and DecodingConfig.from_name("auto").window is None
    assert DecodingConfig.from_name("auto", window=8).describe() == "auto (window=8)"
    assert DecodingConfig.from_name("mc-sjd").window == 16 and DecodingConfig.from_name("mc-sjd").branches == 0
    with pytest.raises(ValueError, match="cost must be one of"):
        DecodingConfig(method="auto", cost="sometimes")


def test_after_ar_steps_the_prior_comes_back():
    """A stretch of AR steps (which show nothing of the drafts) must not leave auto stuck
    on them: what was learnt fades and a window is tried again."""
    steep = CostCurve([1, 5, 9, 17, 33], [1.0, 1.6, 2.0, 2.6, 3.5], rows=2)
    c = chooser(steep)
    c.ar_steps = True
    assert c.choose(1).window > 0  # the prior's scale: windows pay
    for _ in range(5):  # windows that commit nothing past their first token
        c.observe(Choice(16), run_tokens=4 * 1.0, by_branches=0.0, forwards=4, glue_s=0.0)
    assert c.choose(1).window == 0
    for _ in range(30):
        c.observe(Choice(0), run_tokens=0.0, by_branches=0.0, forwards=4, glue_s=0.0)
    assert c.choose(1).window > 0


def test_auto_offers_branch_presets_only_where_tree_attention_runs():
    """On CUDA auto may take branch presets, but not from a session without tree attention
    or under logits processors, which refuse branches; a fixed setting is never dropped."""
    from mmspec.decoding.branches.setting import BranchSetting
    from mmspec.decoding.loop.jacobi import branch_options

    auto, cuda = DecodingConfig.from_name("auto"), torch.device("cuda")
    assert branch_options(auto, cuda) == (None, BranchSetting(4, 4, 2), BranchSetting(8, 12, 3))
    assert branch_options(auto, cuda, tree=False) == (None,)
    assert branch_options(auto, torch.device("cpu")) == (None,)
    fixed = DecodingConfig.from_name("auto", branches=4)
    assert branch_options(fixed, cuda, tree=False) == (None, fixed.branch_setting)


class RecordingChooser(FickleChooser):
    """FickleChooser that keeps every observation it is given."""

    seen: list = []

    def observe(self, choice, run_tokens, by_branches, forwards, glue_s, ar_glue_s=0.0, scale=1.0, excess_s=0.0, draft_s=0.0, rejections=0.0, head_s=0.0):
        RecordingChooser.seen.append((choice.window, run_tokens, forwards))


def test_the_prefill_is_not_observed_as_a_window_forward():
    """The prefill feeds no window: counted as one, it would read as a window that
    committed nothing and pull the acceptance prior down before any draft was tried."""
    RecordingChooser.seen = []
    config = DecodingConfig(method="auto", chooser=RecordingChooser, cost="off")
    generate(tiny_model(), torch.full((2,), 1), config, SAMPLING, torch.Generator().manual_seed(0))
    assert RecordingChooser.seen and RecordingChooser.seen[0][2] == 0, RecordingChooser.seen


def test_random_drafts_count_their_hits_where_the_loop_knows_them():
    """Keyed, a random first draft is the uniform distribution's Gumbel winner, which the
    committed token often is: its hits are counted, and it wins over a copy that hits less."""
    from mmspec.core.layout import TokenLayout
    from mmspec.decoding.auto.acceptance import DrafterHits
    from mmspec.decoding.drafts import Copy, FirstOf, Random

    layout = TokenLayout.grid((2, 4), 8)
    hits = DrafterHits((FirstOf((Copy("row"), Random())), Random()), layout, "cpu")
    tokens = torch.tensor([[1, 2, 3, 4, 5, 2, 3, 7]])[..., None]  # one of four copies from above hits
    new, committed = torch.ones(1, 8, dtype=torch.bool), torch.ones(1, 8, dtype=torch.bool)
    hits.observe(tokens, new, committed)
    assert hits.best().name == "above"  # random's proposals unknown: no hits
    hits.observe(tokens, new, committed, at_random=torch.where(torch.arange(8) % 4 == 1, 0, tokens[..., 0])[..., None])
    assert hits.best().name == "random"  # 6 of 8 against 2 of 4 (twice)
