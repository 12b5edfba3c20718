"""Diffusers-style pipelines, one file per model family."""

from __future__ import annotations

import json
from pathlib import Path

PIPELINES = {
    "LlamaGenPipeline": "mmspec.pipelines.llamagen",
    "Emu3Pipeline": "mmspec.pipelines.emu3",
    "JanusPipeline": "mmspec.pipelines.janus",
}


def load_pipeline(path: str | Path):
    """Loads a saved pipeline directory of any family, by the class its `model_index.json` names."""
    import importlib

    root = Path(path)
    index = root / "model_index.json"
    if not index.is_file():
        raise ValueError(f"{root} is not a saved pipeline (no model_index.json)")
    try:
        name = json.loads(index.read_text()).get("_class_name")
    except json.JSONDecodeError as err:
        raise ValueError(f"{index} is not valid JSON ({err})") from None
    if name not in PIPELINES:
        raise ValueError(f"{root} holds a {name!r} pipeline; mmspec has {', '.join(PIPELINES)}")
    return getattr(importlib.import_module(PIPELINES[name]), name).from_pretrained(root)
