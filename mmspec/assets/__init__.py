"""The embedded default model: a small class-conditional LlamaGen trained on the Shapes
dataset (`scripts/train_default_model.py`), shipped as package data in
`mmspec/assets/default/` (`DEFAULT_ASSETS`), so an installed mmspec finds it anywhere.

The folder is a saved `LlamaGenPipeline`: `transformer/`, `vqvae/`, `classifier/` and a
`model_index.json` naming the classes, the default sampling, the image size and the
training provenance. The GPT and VQ load through the same code path as original LlamaGen
checkpoints (`LlamaGenGPT.from_checkpoint(<safetensors>, LlamaGenConfig.from_dict(<config.json>))`).

Example:
    >>> from mmspec.assets import load_default
    >>> model = load_default()
    >>> model.class_names[:3], model.gpt.config.block_size
    (['circle', 'square', 'triangle'], 256)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from mmspec.core.sampling import SamplingConfig
from mmspec.metrics.classifier import ClassifierConfig, ShapesClassifier
from mmspec.models.llamagen import LlamaGenGPT
from mmspec.tokenizers.llamagen_vq import LlamaGenVQ

DEFAULT_ASSETS = Path(__file__).resolve().parent / "default"
MESH_ASSETS = Path(__file__).resolve().parent / "mesh"  # the shipped mesh model (`mmspec.pipelines.mesh`)
SPEECH_ASSETS = Path(__file__).resolve().parent / "speech"  # a saved SpeechPipeline (scripts/train_speech_model.py)
VIDEO_ASSETS = Path(__file__).resolve().parent / "video"  # the shipped video model (a saved VideoPipeline)
LPD_ASSETS = Path(__file__).resolve().parent / "lpd"  # the shipped LPD model (a saved LPDPipeline)
CAPTIONER_ASSETS = Path(__file__).resolve().parent / "captioner"  # the shipped captioner (a saved CaptioningPipeline)
# the shipped models by name: `--pipeline lpd` (or `load_pipeline("speech")`) works from any folder
SHIPPED_PIPELINES = {"default": DEFAULT_ASSETS, "lpd": LPD_ASSETS, "video": VIDEO_ASSETS, "mesh": MESH_ASSETS,
                     "speech": SPEECH_ASSETS, "captioner": CAPTIONER_ASSETS}


def pipeline_path(name_or_path: str | Path) -> Path:
    """The folder of a shipped model's name ("default", "lpd", "video", "mesh", "speech",
    "captioner"), or `name_or_path` itself as a path. A folder of that name in the working
    directory wins over the shipped model (it is what the user pointed at)."""
    path = Path(name_or_path)
    if isinstance(name_or_path, str) and name_or_path in SHIPPED_PIPELINES and not path.exists():
        return SHIPPED_PIPELINES[name_or_path]
    return path


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


def load_classifier(root: str | Path = DEFAULT_ASSETS, device: str | torch.device = "cpu") -> ShapesClassifier:
    """The shipped Shapes classifier alone."""
    from mmspec.pipelines.pipeline_utils import read_json

    folder = Path(root) / "classifier"
    config = ClassifierConfig.from_dict(read_json(folder / "config.json", "Shapes classifier"))
    return ShapesClassifier.from_checkpoint(folder / "model.safetensors", config).to(device)


def load_default(root: str | Path = DEFAULT_ASSETS, device: str | torch.device = "cpu") -> DefaultModel:
    """Loads the embedded default model (or a folder saved from a pipeline loaded from it).

    Args:
        root (`str` or `Path`, *optional*): the folder holding `model_index.json` and
            `transformer/`, `vqvae/`, `classifier/` (defaults to `DEFAULT_ASSETS`).
        device (`str` or `torch.device`, *optional*, defaults to "cpu"): where to put it.
    """
    from mmspec.pipelines.llamagen import LlamaGenPipeline

    pipe = LlamaGenPipeline.from_pretrained(root).to(device)
    if pipe.classifier is None or "image_size" not in pipe.metadata:
        raise ValueError(f"{root} is a LlamaGen pipeline without the classifier and image size of the default model; "
                         "run scripts/train_default_model.py")
    return DefaultModel(
        gpt=pipe.transformer,
        vq=pipe.vqvae,
        classifier=pipe.classifier,
        class_names=pipe.class_names,
        sampling=SamplingConfig(**pipe.default_sampling),
        image_size=int(pipe.metadata["image_size"]),
    )
