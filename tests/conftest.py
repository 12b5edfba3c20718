import json
import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def llamagen_c2i_fixture():
    """The reference outputs of the original LlamaGen code (see fixtures/llamagen/README.md)."""
    root = FIXTURES / "llamagen" / "c2i"
    return {
        "root": root,
        "config": json.loads((root / "config.json").read_text()),
        "reference": torch.load(root / "reference.pt", weights_only=True),
    }
