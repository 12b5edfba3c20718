"""What a device does, decided once per call: `DeviceProfile`.

A call resolves its profile from the device its model lives on (`device_profile`), and the
engine reads it wherever hardware matters:

- the kernels' dispatch: verification by the Triton kernels (CUDA) or by the PyTorch
  reference (everywhere else);
- auto: whether it offers branches, and which settings (on a GPU a forward's cost is nearly
  flat up to a few hundred inputs; on a CPU a branch forward costs several plain ones);
- timing: how to wait for the device before reading the clock;
- the cost curve's key: the hardware's name (and the thread count on a CPU).

Nothing else in `mmspec.decoding` or `mmspec.kernels` asks whether a tensor is on CUDA.

`forced_profile("cuda")` gives a block of code the CUDA profile on whatever device its
tensors are on. With Triton in its interpreter (`TRITON_INTERPRET=1`, set before Triton is
imported) the suite runs every CUDA branch, the Triton kernels inside the real loop
included, on a CPU: on a GPU only the hardware differs.

A device with no profile of its own (MPS, XPU) gets the PyTorch path, and the call's stats
say so (`DecodeStats.device`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import platform
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

import torch

# auto's branch settings where a forward's cost is nearly flat in its inputs: (candidates m,
# slots D, length c), docs/decoding-methods.md's rows
GPU_BRANCH_PRESETS = ((4, 4, 2), (8, 12, 3))
PROFILES = ("cuda", "cpu")  # the kinds with a policy of their own; forced_profile takes these

_forced: ContextVar[str | None] = ContextVar("mmspec_forced_profile", default=None)


@functools.cache
def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def triton_interpreted() -> bool:
    """Whether Triton runs its kernels in the interpreter (on CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


@dataclass(frozen=True)
class DeviceProfile:
    """What one call does on its device.

    Attributes:
        kind (`str`): the policy: "cuda", "cpu", or the type of a device with no policy of
            its own ("mps", "xpu"), which gets the PyTorch path and no branches.
        device (`torch.device`): the hardware the call's tensors live on (under
            `forced_profile`, another kind's hardware).
        triton (`bool`): verification by the Triton kernels, where a kernel covers the rule.
        branch_presets (`tuple`): auto's branch settings, (m, D, c) each; none where a
            branch forward costs several plain ones.
    """

    kind: str
    device: torch.device
    triton: bool
    branch_presets: tuple[tuple[int, int, int], ...] = ()

    def synchronize(self) -> None:
        """Waits for the device's queued work, before a clock is read."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @property
    def hardware(self) -> str:
        """The name of the hardware: the GPU's, or the CPU's model and cores."""
        if self.device.type == "cuda":
            return torch.cuda.get_device_name(self.device)
        if self.device.type == "cpu":
            return f"CPU: {cpu_model()}, {os.cpu_count()} cores"
        return self.device.type

    def cost_key(self) -> str:
        """What the cost curve of a forward depends on, of the device: the policy, the
        hardware and (on a CPU) the threads."""
        threads = torch.get_num_threads() if self.device.type == "cpu" else 0
        return f"{self.kind}|{self.device.type}|{platform.machine()}|{self.hardware}|threads={threads}"

    def describe(self) -> str:
        """One line for the stats: the policy, its verification, and where it runs."""
        verification = "Triton verification" if self.triton else "PyTorch verification"
        if self.kind not in PROFILES:
            return f"{self.kind}: no profile for {self.kind} devices, so {verification} and no branches under auto"
        where = "" if self.kind == self.device.type else f" on {self.device.type} tensors"
        return f"{self.kind} ({verification}{where})"


def device_profile(device: torch.device | str | DeviceProfile) -> DeviceProfile:
    """The profile of a call whose model lives on `device` (a profile is returned as given),
    the forced one's policy where `forced_profile` is in effect."""
    if isinstance(device, DeviceProfile):
        return device
    device = torch.device(device)
    kind = _forced.get() or device.type
    if kind == "cuda":
        return DeviceProfile("cuda", device, triton=triton_installed(), branch_presets=GPU_BRANCH_PRESETS)
    return DeviceProfile(kind, device, triton=False)


@contextlib.contextmanager
def forced_profile(kind: str):
    """Every call inside the block gets the `kind` profile ("cuda" or "cpu") on its own
    device. The CUDA profile on a CPU needs Triton's interpreter, chosen before Triton is
    imported (`TRITON_INTERPRET=1`).

    Example:
        >>> with forced_profile("cpu"):
        ...     device_profile("cuda").triton
        False
    """
    if kind not in PROFILES:
        raise ValueError(f"unknown device profile {kind!r}; choose from {', '.join(PROFILES)}")
    if kind == "cuda" and not torch.cuda.is_available() and not (triton_installed() and triton_interpreted()):
        raise ValueError("the CUDA profile without a GPU runs the Triton kernels in Triton's interpreter: install triton "
                         "and set TRITON_INTERPRET=1 before anything imports it")
    token = _forced.set(kind)
    try:
        yield
    finally:
        _forced.reset(token)
