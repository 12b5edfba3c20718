import json
import os
import shutil
import tempfile
from pathlib import Path

# Triton kernels run on CPU only in interpreter mode, which must be chosen before Triton is
# first imported (transformers and diffusers may import it): decide here, before torch
if "TRITON_INTERPRET" not in os.environ and shutil.which("nvidia-smi") is None and not Path("/dev/nvidia0").exists():
    os.environ["TRITON_INTERPRET"] = "1"

import pytest
import torch

from mmspec.kernels.interpreter import quicken_interpreter
from tests.helpers import FIXTURES

if os.environ.get("TRITON_INTERPRET") == "1":
    quicken_interpreter()  # the kernels' tests and the CUDA lane run Triton's interpreter

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# auto's cost curves go to a folder of this run, not the user's cache
os.environ.setdefault("MMSPEC_CACHE_DIR", tempfile.mkdtemp(prefix="mmspec-test-cache-"))
# the models under test are tiny: one thread is faster than two fighting over a busy CPU
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def llamagen_c2i_fixture():
    """The reference outputs of the original LlamaGen code (see fixtures/llamagen/README.md)."""
    root = FIXTURES / "llamagen" / "c2i"
    return {
        "root": root,
        "config": json.loads((root / "config.json").read_text()),
        "reference": torch.load(root / "reference.pt", weights_only=True),
    }
