"""benchmarks/perf/original_ar.py: mmspec's LlamaGen weights in the original LlamaGen code.

The tests that run the original code need a checkout of FoundationVision/LlamaGen, named
by the environment variable LLAMAGEN_REPO; without it they skip."""

import os
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from benchmarks.perf import original_ar
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.generate import generate
from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT

LLAMAGEN_REPO = os.environ.get("LLAMAGEN_REPO")
needs_repo = pytest.mark.skipif(
    not LLAMAGEN_REPO or not (Path(LLAMAGEN_REPO) / "autoregressive" / "models" / "gpt.py").is_file(),
    reason="set LLAMAGEN_REPO to a checkout of https://github.com/FoundationVision/LlamaGen",
)


@pytest.fixture(autouse=True)
def forget_the_original():
    """The original's top-level packages (`autoregressive`, `utils`) leave no trace for the
    tests that run after these."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.split(".")[0] in ("autoregressive", "utils"):
            del sys.modules[name]


def tiny_llamagen() -> LlamaGenGPT:
    torch.manual_seed(0)
    model = LlamaGenGPT(LlamaGenConfig(dim=64, n_layer=2, n_head=4, vocab_size=64, block_size=16, num_classes=10,
                                       multiple_of=32)).eval()
    # wider than the 0.02 init, so that greedy picks are far from ties under either code's rounding
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.3)
    return model


def test_load_original_refuses_a_folder_without_the_original_gpt(tmp_path):
    with pytest.raises(SystemExit, match="no autoregressive/models/gpt.py"):
        original_ar.load_original(tmp_path, tiny_llamagen())


@needs_repo
@pytest.mark.filterwarnings("ignore:.*sdp_kernel:FutureWarning")  # the original's, at every step
def test_original_greedy_ar_matches_mmspec_ar_with_cfg():
    model = tiny_llamagen()
    original_model, original_generate = original_ar.load_original(Path(LLAMAGEN_REPO), model)
    sampling = {"guidance_scale": 3.0, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    original = original_ar.Original(original_model, original_generate, sampling, model.config.block_size)
    for label in (0, 7):
        theirs, out = original(label, 2, seed=0, greedy=True)
        ours, stats = generate(model, torch.tensor([label, label]), decoding="ar",
                               sampling=SamplingConfig(guidance_scale=3.0, temperature=0.0, top_k=1))
        assert torch.equal(theirs, ours)
        assert out["forwards"] == [16, 16] and stats.forward_passes == 16  # the prefill and 15 steps
        assert len(ours[0].unique()) > 1  # not a degenerate repeat of one token


@needs_repo
def test_original_holds_every_weight_of_the_mmspec_model():
    model = tiny_llamagen()
    original_model, _ = original_ar.load_original(Path(LLAMAGEN_REPO), model)
    theirs = original_model.state_dict()
    assert theirs.keys() == model.state_dict().keys()
    assert all(torch.equal(theirs[k], v) for k, v in model.state_dict().items())
