"""What every mmspec image pipeline shares: checking the call, running the engine under a
progress bar with `callback_on_step_end`, and turning pixels into the requested output."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from diffusers import DiffusionPipeline

from mmspec.decoding.config import DecodingConfig
from mmspec.core.contracts import TokenModel
from mmspec.core.layout import TokenLayout
from mmspec.decoding.generate import as_decoding, generate
from mmspec.core.sampling import SamplingConfig
from mmspec.images import to_pil
from mmspec.pipelines.pipeline_output import ImagePipelineOutput

OUTPUT_TYPES = ("pil", "np", "pt", "tokens")


def read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise ValueError(f"{path} is missing: not a saved {what}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err})") from None


def read_index(root: str | Path, cls: type) -> tuple[Path, dict]:
    """The saved pipeline folder and its `model_index.json`, checked to name `cls`."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root} is not a directory holding a saved pipeline")
    index = read_json(root / "model_index.json", "pipeline")
    if index.get("_class_name") != cls.__name__:
        raise ValueError(f"{root} holds a {index.get('_class_name')!r} pipeline, not a {cls.__name__}")
    return root, index


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def as_prompts(prompt, name: str = "prompt") -> list[str]:
    """A non-empty list of non-empty strings from a string or a list, else a ValueError."""
    prompts = [prompt] if isinstance(prompt, str) else list(prompt) if isinstance(prompt, (list, tuple)) else []
    if not prompts or any(not isinstance(p, str) or not p.strip() for p in prompts):
        raise ValueError(f"{name} must be a non-empty string or a non-empty list of non-empty strings, got {prompt!r}")
    return prompts


def check_images_per_prompt(num_images_per_prompt) -> None:
    if isinstance(num_images_per_prompt, bool) or not isinstance(num_images_per_prompt, int) or num_images_per_prompt < 1:
        raise ValueError(f"num_images_per_prompt must be an integer >= 1, got {num_images_per_prompt!r}")


def sampling_config(defaults: dict, **overrides) -> SamplingConfig:
    """`defaults` updated by the overrides that are not None."""
    return SamplingConfig(**{**defaults, **{k: v for k, v in overrides.items() if v is not None}})


def to_signed_pixels(pixels: torch.Tensor, image_processor) -> torch.Tensor:
    """VQ decoder output `[B, 3, H, W]`, normalised with the image processor's mean and std
    (what its `postprocess` undoes), -> floats in [-1, 1]."""
    x = pixels.float()
    if image_processor.do_normalize:
        mean = torch.tensor(image_processor.image_mean, device=x.device).view(1, -1, 1, 1)
        std = torch.tensor(image_processor.image_std, device=x.device).view(1, -1, 1, 1)
        x = x * std + mean  # [0, 1]
    return (x * 2 - 1).clamp(-1, 1)


class TokenImagePipeline(DiffusionPipeline):
    """Base of the image pipelines: a TokenModel plus a codec, decoded by `mmspec.decoding`.

    Subclasses encode their condition and decode tokens to pixels; this class runs
    steps 1 (common checks), 4 (decode) and the output of diffusers' `__call__` order.
    """

    def check_common(self, guidance_scale: float, decoding, output_type: str, generator) -> DecodingConfig:
        if guidance_scale is None or not guidance_scale >= 0:
            raise ValueError(f"guidance_scale must be >= 0, got {guidance_scale}")
        if output_type not in OUTPUT_TYPES:
            raise ValueError(f"unknown output_type {output_type!r}; choose from {', '.join(OUTPUT_TYPES)}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ValueError("generator must be one torch.Generator (it seeds the whole batch)")
        return as_decoding(decoding)

    def decode_tokens(
        self,
        token_model: TokenModel,
        condition: Any,
        layout: TokenLayout,
        decoding: DecodingConfig,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        callback_on_step_end: Callable | None,
    ):
        """Runs the engine under a progress bar; calls `callback_on_step_end(pipe, step,
        tokens_committed, {})` after every forward, as diffusers calls it after every step."""
        state = {"step": 0}
        with self.progress_bar(total=layout.length) as bar:

            def on_step(done: int, total: int) -> None:
                bar.update(done - bar.n)
                if callback_on_step_end is not None:
                    callback_on_step_end(self, state["step"], done, {})
                state["step"] += 1

            return generate(token_model, condition, decoding, sampling, generator, on_step, layout=layout)

    @staticmethod
    def to_output(images: torch.Tensor | None, tokens: torch.Tensor, stats, output_type: str, return_dict: bool):
        """`images [B, 3, H, W]` in [-1, 1] -> the requested output type."""
        if output_type == "tokens":
            out = tokens
        elif output_type == "pt":
            out = ((images.float() + 1) / 2).clamp(0, 1).cpu()
        elif output_type == "np":
            out = ((images.float() + 1) / 2).clamp(0, 1).permute(0, 2, 3, 1).cpu().numpy().astype(np.float32)
        else:
            out = to_pil(images)
        per_image = stats.per_sample()
        if not return_dict:
            return out, per_image
        return ImagePipelineOutput(images=out, stats=per_image, tokens=tokens)


class TransformersImagePipeline(TokenImagePipeline):
    """A pipeline over a transformers model and its processor (Emu3, Janus), saved as
    transformers saves each (`model/`, `processor/`) plus a `model_index.json`.
    Subclasses name the two transformers classes."""

    model_class_name: str
    processor_class_name: str
    model_cpu_offload_seq = "model"

    def __init__(self, model, processor):
        super().__init__()
        self.register_modules(model=model, processor=processor)

    @classmethod
    def _classes(cls):
        import transformers

        return getattr(transformers, cls.model_class_name), getattr(transformers, cls.processor_class_name)

    @classmethod
    def from_transformers(cls, name_or_path: str | Path, **model_kwargs):
        """Builds the pipeline from a transformers checkpoint (a hub name or its local copy);
        `model_kwargs` (`dtype=...`) go to the model's `from_pretrained`."""
        model_cls, processor_cls = cls._classes()
        return cls(model_cls.from_pretrained(name_or_path, **model_kwargs).eval(), processor_cls.from_pretrained(name_or_path))

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, **model_kwargs):
        """Loads a directory written by `save_pretrained`."""
        root, _ = read_index(pretrained_model_name_or_path, cls)
        model_cls, processor_cls = cls._classes()
        return cls(model_cls.from_pretrained(root / "model", **model_kwargs).eval(), processor_cls.from_pretrained(root / "processor"))

    def save_pretrained(self, save_directory: str | Path, **kwargs) -> None:
        root = Path(save_directory)
        self.model.save_pretrained(root / "model")
        self.processor.save_pretrained(root / "processor")
        write_json(root / "model_index.json", {
            "_class_name": type(self).__name__,
            "model": ["transformers", self.model_class_name],
            "processor": ["transformers", self.processor_class_name],
        })
