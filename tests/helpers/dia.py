"""The tiny Dia pipeline of `tests/fixtures/dia` (see its make_fixture.py)."""

import torch

from mmspec.pipelines.dia import DiaPipeline
from tests.helpers import FIXTURES

ROOT = FIXTURES / "dia"


def dia_pipeline(dtype: torch.dtype | None = None) -> DiaPipeline:
    """A fresh pipeline over the fixture's tiny Dia and DAC (float64: transformers' generate
    ran in it; float32 for timing)."""
    return DiaPipeline.from_dia(ROOT / "model", ROOT / "dac", torch_dtype=dtype)
