"""The embedded default model: a small class-conditional LlamaGen trained on the Shapes
dataset (`scripts/train_default_model.py`), shipped in `assets/default/`.

The folder is a saved `LlamaGenPipeline` (`transformer/`, `vqvae/`, `model_index.json`
naming the classes and the default sampling) plus `classifier/`. The GPT and VQ load
through the same code path as original LlamaGen checkpoints
(`LlamaGenGPT.from_checkpoint(<safetensors>, LlamaGenConfig.from_dict(<config.json>))`).

Example:
    >>> from mmspec.assets import load_default
    >>> model = load_default()
    >>> model.class_names[:3], model.gpt.config.block_size
    (['circle', 'square', 'triangle'], 256)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from mmspec.core.sampling import SamplingConfig
from mmspec.metrics.classifier import ClassifierConfig, ShapesClassifier
from mmspec.models.llamagen import LlamaGenConfig, LlamaGenGPT
from mmspec.tokenizers.llamagen_vq import LlamaGenVQ, VQConfig

DEFAULT_ASSETS = Path(__file__).resolve().parent.parent / "assets" / "default"


@dataclass
class DefaultModel:
    """The shipped components and what `model_index.json` says about them.

    Attributes:
        gpt (`LlamaGenGPT`): the class-conditional generator (c2i).
        vq (`LlamaGenVQ`): its tokenizer (16x16 codes for 64x64 images).
        classifier (`ShapesClassifier`): the judge used by `mmspec.metrics.quality`.
        class_names (`list[str]`): the name of each class label.
        sampling (`SamplingConfig`): the documented default sampling settings.
        image_size (`int`): pixels per side.
    """

    gpt: LlamaGenGPT
    vq: LlamaGenVQ
    classifier: ShapesClassifier
    class_names: list[str]
    sampling: SamplingConfig
    image_size: int


def _config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def load_classifier(root: str | Path = DEFAULT_ASSETS, device: str | torch.device = "cpu") -> ShapesClassifier:
    """The shipped Shapes classifier alone."""
    folder = Path(root) / "classifier"
    config = ClassifierConfig.from_dict(_config(folder))
    return ShapesClassifier.from_checkpoint(folder / "model.safetensors", config).to(device)


def load_default(root: str | Path = DEFAULT_ASSETS, device: str | torch.device = "cpu") -> DefaultModel:
    """Loads the embedded default model.

    Args:
        root (`str` or `Path`, *optional*): the folder holding `model_index.json` and
            `transformer/`, `vqvae/`, `classifier/` (defaults to the repository's `assets/default`).
        device (`str` or `torch.device`, *optional*, defaults to "cpu"): where to put it.
    """
    root = Path(root)
    index_path = root / "model_index.json"
    if not index_path.is_file():
        raise ValueError(f"no default model at {root}: {index_path} is missing; run scripts/train_default_model.py")
    index = json.loads(index_path.read_text())
    gpt = LlamaGenGPT.from_checkpoint(root / "transformer" / "model.safetensors", LlamaGenConfig.from_dict(_config(root / "transformer")))
    vq = LlamaGenVQ.from_checkpoint(root / "vqvae" / "model.safetensors", VQConfig.from_dict(_config(root / "vqvae")))
    return DefaultModel(
        gpt=gpt.to(device),
        vq=vq.to(device),
        classifier=load_classifier(root, device),
        class_names=list(index["class_names"]),
        sampling=SamplingConfig(**index["default_sampling"]),
        image_size=int(index["image_size"]),
    )
