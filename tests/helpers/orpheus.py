"""The tiny Orpheus-format pipeline of `tests/fixtures/orpheus` (see its make_fixture.py) and
the original code's outputs on it."""

import json
from functools import cache

import torch

from mmspec.pipelines.orpheus import OrpheusPipeline
from mmspec.tokenizers.snac_codec import SnacCodec
from tests.helpers import FIXTURES

ROOT = FIXTURES / "orpheus"
VOICES = ["tara", "leo"]


@cache
def fixture_format() -> dict:
    return json.loads((ROOT / "format.json").read_text())


@cache
def reference() -> list[dict]:
    """Per prompt: its voice, text, framed prompt ids, greedy tokens (stop included),
    Orpheus's codes, teacher-forced logits, streamed chunks and the whole clip's waveform."""
    return torch.load(ROOT / "reference.pt", weights_only=True)


def orpheus_pipeline(**kwargs) -> OrpheusPipeline:
    """A fresh pipeline over the fixture's weights (the original's greedy clips fit it)."""
    components = OrpheusPipeline.declared_components
    spec = fixture_format()
    return OrpheusPipeline(components["model"].load(ROOT / "lm", None), components["tokenizer"].load(ROOT / "tokenizer", None),
                           SnacCodec.from_pretrained(ROOT / "snac"), audio_format=spec["audio_format"], voices=VOICES,
                           max_new_tokens=7 * spec["frames"], **kwargs)
