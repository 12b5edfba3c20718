"""Diffusers-style pipelines, one file per model family."""

from __future__ import annotations

from pathlib import Path

from mmspec import PIPELINES


def load_pipeline(path: str | Path, **kwargs):
    """Loads a saved pipeline directory of any family, by the class its `model_index.json`
    names (what `DiffusionPipeline.from_pretrained` cannot do for mmspec's classes), or a
    shipped model by its name ("default", "lpd", "video", "mesh", "speech", "captioner").
    `kwargs` (`torch_dtype=`) go to its `from_pretrained`.

    Example:
        >>> from mmspec.assets import DEFAULT_ASSETS
        >>> load_pipeline(DEFAULT_ASSETS).condition_kind
        'class'
    """
    import importlib

    from mmspec.utils.json_files import read_json

    from mmspec.assets import SHIPPED_PIPELINES, pipeline_path

    root = pipeline_path(path)
    if not root.is_dir():
        raise ValueError(f"{root} is not a directory holding a saved pipeline, nor a shipped model's name "
                         f"({', '.join(SHIPPED_PIPELINES)})")
    name = read_json(root / "model_index.json", "pipeline").get("_class_name")
    if name not in PIPELINES:
        raise ValueError(f"{root} holds a {name!r} pipeline; mmspec has {', '.join(PIPELINES)}")
    return getattr(importlib.import_module(PIPELINES[name]), name).from_pretrained(root, **kwargs)
