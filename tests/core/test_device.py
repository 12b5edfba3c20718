"""The device profile: one object decides what a device does (kernels, auto's branches,
synchronisation, the cost curve's key), and a forced profile runs the CUDA policy on CPU
tensors."""

import ast
from pathlib import Path

import pytest
import torch

from mmspec.core.device import GPU_BRANCH_PRESETS, device_profile, forced_profile

ROOT = Path(__file__).resolve().parents[2] / "mmspec"


def test_cpu_verifies_by_pytorch_and_offers_no_branches():
    profile = device_profile("cpu")
    assert (profile.kind, profile.triton, profile.branch_presets) == ("cpu", False, ())
    assert profile.describe() == "cpu (PyTorch verification)"
    profile.synchronize()  # a CPU waits for nothing


def test_cuda_verifies_by_triton_and_offers_the_gpu_presets():
    profile = device_profile(torch.device("cuda", 1))  # a profile is a policy: no GPU needed to build it
    assert (profile.kind, profile.triton, profile.branch_presets) == ("cuda", True, GPU_BRANCH_PRESETS)
    assert profile.device == torch.device("cuda", 1)


@pytest.mark.parametrize("device", ["mps", "xpu"])
def test_a_device_without_a_profile_gets_the_pytorch_path_and_says_so(device):
    profile = device_profile(device)
    assert (profile.kind, profile.triton, profile.branch_presets) == (device, False, ())
    assert f"no profile for {device} devices" in profile.describe() and "PyTorch verification" in profile.describe()


def test_forced_profile_gives_cuda_policy_to_cpu_tensors_within_its_block():
    with forced_profile("cuda"):
        profile = device_profile("cpu")
        assert (profile.kind, profile.device.type, profile.triton) == ("cuda", "cpu", True)
        assert profile.describe() == "cuda (Triton verification on cpu tensors)"
    assert device_profile("cpu").kind == "cpu"


def test_forced_cuda_profile_has_its_own_cost_key():
    """A curve measured under the CUDA policy on a CPU (branch sizes included) is not the CPU's."""
    plain = device_profile("cpu").cost_key()
    with forced_profile("cuda"):
        assert device_profile("cpu").cost_key() != plain


def test_forced_profile_refuses_unknown_kinds():
    with pytest.raises(ValueError, match="unknown device profile 'tpu'; choose from cuda, cpu"):
        with forced_profile("tpu"):
            pass


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the CUDA profile runs the compiled kernels")
def test_forced_cuda_profile_without_gpu_needs_the_triton_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        with forced_profile("cuda"):
            pass


def device_questions(path: Path) -> list[str]:
    """The places in `path` that ask a tensor or device whether it is CUDA."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr == "is_cuda":
            found.append(f"{path.name}:{node.lineno} .is_cuda")
        if isinstance(node, ast.Compare) and any(isinstance(c, ast.Constant) and c.value == "cuda" for c in node.comparators):
            found.append(f"{path.name}:{node.lineno} == 'cuda'")
    return found


def test_only_the_device_profile_asks_whether_a_device_is_cuda():
    """What a device does is decided in mmspec/core/device.py alone: the engine and the
    kernels' dispatch read the call's profile."""
    paths = [p for package in ("decoding", "kernels") for p in (ROOT / package).rglob("*.py")]
    assert paths and [q for p in paths for q in device_questions(p)] == []
    assert device_questions(ROOT / "core" / "device.py")  # the check can see a question where there is one
