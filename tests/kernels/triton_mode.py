"""Where the Triton kernels' tests run: import this before anything imports triton.

Without CUDA, Triton runs only in its interpreter, which `@triton.jit` selects when it
decorates (Triton's own library functions included), so the variable must be set before
triton is first imported. With CUDA the same tests run the compiled kernels on the GPU.
Importing this skips the importing test module where neither can happen."""

import os
import sys

import pytest
import torch

ON_GPU = torch.cuda.is_available()
if not ON_GPU and "triton" not in sys.modules:
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="Triton is not installed (it ships for Linux x86_64 only)")
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
if not (ON_GPU or INTERPRETED):
    pytest.skip("triton was imported before TRITON_INTERPRET=1 could be set and there is no GPU; "
                "run this file first or alone", allow_module_level=True)
DEVICE = "cpu" if INTERPRETED else "cuda"
