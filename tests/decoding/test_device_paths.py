"""What the engine does on a CUDA device, asked on a CPU through the device profile: the
branch presets auto offers there, and the memory check that counts them as the decode
allocates them. (The loop itself under the CUDA profile: tests/cuda_lane.)"""

import importlib

import pytest
import torch

from mmspec.assets import DEFAULT_ASSETS
from mmspec.core.device import device_profile, forced_profile
from mmspec.decoding.branches.setting import BranchSetting
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.loop.jacobi import branch_options, extra_positions
from mmspec.pipelines import checks, load_pipeline


@pytest.fixture(scope="module")
def shipped():
    return load_pipeline(DEFAULT_ASSETS)


def test_auto_on_cuda_counts_the_scratch_positions_of_its_branch_presets(shipped):
    """Regression: the presets were plain tuples, and on any CUDA device auto's first call
    of a tree-attention pipeline (the shipped one included) failed in `extra_positions` with
    `'tuple' object has no attribute 'candidates'`."""
    layout = shipped.transformer.layout()
    auto = DecodingConfig.from_name("auto")
    on_cuda = extra_positions(layout, auto, torch.device("cuda"))
    assert on_cuda > extra_positions(layout, auto, torch.device("cpu")) == auto.draft_window + 1
    assert all(isinstance(s, BranchSetting) for s in branch_options(auto, torch.device("cuda")) if s is not None)
    assert on_cuda == extra_positions(layout, auto, device_profile("cuda"))  # a device or its profile: one answer


def test_the_memory_check_counts_what_the_decode_allocates(shipped, monkeypatch):
    """Regression: the pipelines' memory check counted a forward's inputs without the device,
    so on CUDA it left out the branch nodes the decode then allocated."""
    counted, allocated = [], []
    monkeypatch.setattr(checks, "forward_bytes", lambda rows, inputs, *args, **kwargs: counted.append(inputs) or 0)
    def recording_start(*args, extra_positions=0, **kwargs):
        allocated.append(extra_positions)
        raise RuntimeError("allocated")  # the count is all this test needs

    monkeypatch.setattr(shipped.transformer, "start", recording_start)
    for kind in ("cpu", "cuda"):
        with forced_profile(kind), pytest.raises(RuntimeError, match="allocated"):
            shipped(class_labels=[0], generator=torch.Generator().manual_seed(0))
    assert counted == allocated and counted[1] > counted[0]


def test_a_device_without_a_profile_decodes_by_the_reference_and_says_so(monkeypatch):
    """An MPS model (stood in for by a CPU one, which is where its tensors stay) gets the
    PyTorch path and no branches; its stats name the device once, and nothing fails."""
    from tests.decoding.helpers import tiny_model

    engine = importlib.import_module("mmspec.decoding.generate")
    model, labels = tiny_model(vocab_size=16, block_size=9, seed=3), torch.tensor([0, 1])
    ar, _ = engine.generate(model, labels, "ar", generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(engine, "model_device", lambda model: torch.device("mps"))
    tokens, stats = engine.generate(model, labels, "auto", generator=torch.Generator().manual_seed(0))
    assert torch.equal(tokens, ar)
    assert stats.device == "mps: no profile for mps devices, so PyTorch verification and no branches under auto"
    assert set(stats.choices["branches"]) == {"none"}
