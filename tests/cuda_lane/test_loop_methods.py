"""The decoding loop under the CUDA profile, on a tiny LlamaGen with tree attention: each
exact method (keyed, auto, SJD, MC-SJD; with branches; with a draft head) and the relaxed
rules run with the Triton kernels verifying inside the loop. Keyed and auto give AR's
tokens for 3 seeds, and SJD and MC-SJD the tokens of the CPU profile for 2 (the kernel
decides as its PyTorch reference does); SJD and MC-SJD pass a chi-square with the kernel in
the loop."""

from dataclasses import replace

import pytest
import torch

from mmspec.core.device import forced_profile
from mmspec.core.layout import TokenLayout
from mmspec.decoding.auto.chooser import Choice
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from mmspec.metrics.losslessness import all_sequences, chi_square, sequence_counts, sequence_probs
from tests.decoding.helpers import FickleChooser, tiny_model
from tests.decoding.test_head_drafts import random_head

SAMPLING = SamplingConfig(guidance_scale=2.0, top_k=12)
LABELS = torch.tensor([0, 1, 2])


@pytest.fixture(scope="module")
def model():
    return tiny_model(vocab_size=16, block_size=9, seed=3)


@pytest.fixture(scope="module")
def layout(model):
    """The model's layout with token embeddings, for LANTERN's and GSD's neighbourhoods."""
    return replace(model.layout(), token_embeddings=torch.randn(16, 3, generator=torch.Generator().manual_seed(0)))


def decode(model, layout, config, rows: int = 3):
    """The first `rows` of the labels, seeds 5, 6, ... (a generator per row)."""
    generators = [torch.Generator().manual_seed(5 + row) for row in range(rows)]
    return generate(model, LABELS[:rows], decoding=config, sampling=SAMPLING, generator=generators, layout=layout)


@pytest.fixture(scope="module")
def ar_tokens(model, layout):
    with forced_profile("cpu"):
        return decode(model, layout, "ar")[0]


KEYED = {
    "keyed": DecodingConfig(method="keyed", window=4),
    "auto": DecodingConfig(method="auto", chooser=FickleChooser, cost="off"),  # branches on and off, window by window
    "keyed+branches": DecodingConfig(method="keyed", window=4, branches=2, branch_slots=2, branch_length=1),
    "keyed+head": "head",
}


@pytest.mark.parametrize("name", list(KEYED))
def test_keyed_methods_verify_by_triton_and_give_ar_tokens(name, model, layout, ar_tokens, kernel_calls):
    config = KEYED[name] if name != "keyed+head" else DecodingConfig(method="keyed", window=4, head=random_head(model),
                                                                    head_depth=2)
    tokens, stats = decode(model, layout, config)
    assert torch.equal(tokens, ar_tokens)
    if "branches" in name or name == "auto":  # branch forwards rank their candidates in the reference
        assert kernel_calls["verify_keyed_reference"] > 0
    else:
        assert kernel_calls["verify_keyed_triton"] > 0 and kernel_calls["verify_keyed_reference"] == 0
    assert stats.device == "cuda (Triton verification on cpu tensors)"


class WindowOfFour(FickleChooser):
    """auto's chooser that takes window 4 without branches at every forward, where the call
    offers branches (the CUDA profile's presets)."""

    def choose(self, windows_per_row: float) -> Choice:
        assert any(setting is not None for setting in self.context.branch_settings)
        return Choice(4, None, self.context.drafters[0])


def test_auto_without_branches_this_forward_runs_the_keyed_kernel(model, layout, ar_tokens, kernel_calls, monkeypatch):
    """Regression: once a call could take branches, every forward asked the keyed
    verification for ranked runners-up, which only the reference gives, and built dense
    rank scores: under auto the Triton keyed kernel never ran on CUDA."""
    from mmspec.decoding.loop import jacobi

    ranked = []
    monkeypatch.setattr(jacobi, "rank_scores", lambda *args: ranked.append(1))
    config = DecodingConfig(method="auto", chooser=WindowOfFour, cost="off")
    tokens, stats = decode(model, layout, config)
    assert torch.equal(tokens, ar_tokens)
    assert kernel_calls["verify_keyed_triton"] == stats.forward_passes - 1 > 0  # every forward after the prefill
    assert kernel_calls["verify_keyed_reference"] == 0 and ranked == []


SAMPLED = {
    "sjd": DecodingConfig(method="sjd", window=6),  # windows cut short by the end: slices the kernel once refused
    "mc-sjd": DecodingConfig(method="mc-sjd", window=3),
    "mc-sjd+branches": DecodingConfig(method="mc-sjd", window=3, branches=1, branch_slots=1, branch_length=1),
    "sjd+head": "head",
    "sjd+lantern": DecodingConfig.from_name("sjd+lantern", window=3, lantern_k=2, lantern_delta=0.3),
    "mc-sjd+gsd": DecodingConfig.from_name("mc-sjd+gsd", window=3, gsd_prob_gap=0.5, gsd_embed_dist=10.0),
}


@pytest.mark.parametrize("name", list(SAMPLED))
def test_sampled_methods_verify_by_triton_as_the_reference_does(name, model, layout, kernel_calls):
    """The Triton kernel is the reference's bit-exact twin: from the same uniforms the loop
    commits the same tokens under either profile (relaxed rules included)."""
    config = SAMPLED[name] if name != "sjd+head" else DecodingConfig(method="sjd", window=3, head=random_head(model),
                                                                    head_depth=2)
    if name == "mc-sjd+branches":  # a line of tokens: 3 neighbours a candidate slot, not a grid's 12 (the interpreter's time)
        line = TokenLayout.grid((9,), 16)
        layout = replace(layout, axes=line.axes, coords=line.coords)
    tokens, _ = decode(model, layout, config, rows=2)  # two rows: a batch, at the interpreter's cost
    assert kernel_calls["verify_triton"] > 0
    with forced_profile("cpu"):
        reference, _ = decode(model, layout, config, rows=2)
    assert torch.equal(tokens, reference)


N_SAMPLES = 300  # Triton's interpreter verifies ~25 windows a second here; the reference's test draws 40,000


@pytest.fixture(scope="module")
def small_distribution():
    """The first 3 tokens of a 3-token vocabulary: 27 sequences and their exact probabilities."""
    model = tiny_model(vocab_size=3, block_size=4, seed=1)
    sampling = SamplingConfig(guidance_scale=2.0)
    sequences = all_sequences(3, 3)
    return model, sampling, sequence_probs(model, torch.full((len(sequences),), 1), sequences, sampling)


@pytest.mark.parametrize("method", ["sjd", "mc-sjd"])
def test_sjd_and_mc_sjd_with_the_kernel_pass_a_chi_square(method, small_distribution, kernel_calls):
    """300 sequences drawn with the Triton kernel verifying fit the exact distribution
    (chi-square at a fixed seed). At this size it catches a sampler that moves ~30% of the
    mass of the likeliest sequences (a kernel that accepts every draft, say), not a small bias:
    that is the reference's 40,000-draw test's, and the tests above tie the kernel to it."""
    model, sampling, probs = small_distribution
    tokens, _ = generate(model, torch.full((N_SAMPLES,), 1), decoding=DecodingConfig(method=method, window=2),
                         sampling=sampling, generator=torch.Generator().manual_seed(11), max_length=3)
    assert kernel_calls["verify_triton"] > 0
    result = chi_square(sequence_counts(tokens, 3), probs)
    assert result.p_value > 1e-3, result
