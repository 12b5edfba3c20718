"""LlamaGenPipeline: class- or text-conditional LlamaGen, decoded by any mmspec method.

Example:
    >>> from mmspec.pipelines.llamagen import LlamaGenPipeline
    >>> from mmspec.assets import DEFAULT_ASSETS
    >>> pipe = LlamaGenPipeline.from_pretrained(DEFAULT_ASSETS)  # doctest: +SKIP
    >>> out = pipe(class_labels=[0, 1], decoding="mc-sjd", generator=torch.Generator().manual_seed(0))  # doctest: +SKIP
    >>> out.images[0].save("0.png"), out.stats[0].forward_passes  # doctest: +SKIP
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from mmspec.core.bounds import images_within_budget
from mmspec.assets import DEFAULT_ASSETS
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.metrics.classifier import ClassifierConfig, ShapesClassifier
from mmspec.models.networks.draft_head import DraftHead, DraftHeadConfig
from mmspec.models.networks.llamagen import CaptionCondition, LlamaGenConfig, LlamaGenGPT
from mmspec.pipelines.base import TokenImagePipeline
from mmspec.pipelines.checks import as_prompts, check_images_per_prompt, class_name_list, sampling_config
from mmspec.pipelines.components import own_module, transformers_model, transformers_processor
from mmspec.tokenizers.llamagen_vq import LlamaGenVQ, VQConfig

# LlamaGen's sampling scripts: CFG 4, top-k 2000
FAMILY_SAMPLING = dict(guidance_scale=4.0, top_k=2000)
VQVAE = own_module(LlamaGenVQ, VQConfig, "LlamaGen VQ")
SHAPES_CLASSIFIER = own_module(ShapesClassifier, ClassifierConfig, "Shapes classifier")


def as_class_labels(class_labels, num_classes: int, class_names: list[str] | None = None) -> torch.Tensor:
    """Long `[B]` from an int, a class name (one of `class_names`), a list of them or an
    integer tensor; booleans, floats and unknown names are refused, not coerced (`True` or
    `1.7` is no class 1)."""
    if isinstance(class_labels, torch.Tensor):
        if class_labels.dtype == torch.bool or class_labels.dtype.is_floating_point or class_labels.dtype.is_complex:
            raise ValueError(f"class_labels must be integers, got a {class_labels.dtype} tensor")
        labels = class_labels.reshape(-1).long()
    else:
        values = list(class_labels) if isinstance(class_labels, (list, tuple)) else [class_labels]
        names = list(class_names or [])
        for v in values:
            if isinstance(v, str) and v not in names:
                known = f"choose from {', '.join(names)}" if names else "this model has no class names; give labels"
                raise ValueError(f"unknown class name {v!r}; {known}")
        values = [names.index(v) if isinstance(v, str) else v for v in values]
        bad = [v for v in values if isinstance(v, bool) or not isinstance(v, numbers.Integral)]
        if bad or isinstance(class_labels, bool):
            raise ValueError(f"class_labels must be class names or integers (or a list of them), got "
                             f"{bad[0] if bad else class_labels!r}")
        out = next((v for v in values if not 0 <= v < num_classes), None)
        if out is not None:  # before torch.tensor, which cannot hold 10**20
            raise ValueError(f"class label {out} is out of range [0, {num_classes})")
        labels = torch.tensor([int(v) for v in values], dtype=torch.long)
    if labels.numel() == 0:
        raise ValueError("class_labels is empty")
    out = labels[(labels < 0) | (labels >= num_classes)]
    if out.numel():
        raise ValueError(f"class label {int(out[0])} is out of range [0, {num_classes})")
    return labels


def left_pad_captions(embeds: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Moves the valid caption tokens to the end and zeroes the padding, as LlamaGen's
    `sample_t2i.py` does (T5 pads on the right)."""
    valid = mask.sum(-1)
    rolled = torch.stack([torch.roll(e, -int(n), dims=0) for e, n in zip(embeds, valid)])
    new_mask = mask.flip(-1)
    return rolled * new_mask[..., None].to(rolled.dtype), new_mask


class LlamaGenPipeline(TokenImagePipeline):
    """LlamaGen GPT (`transformer`) + VQ tokenizer (`vqvae`), for t2i a T5 encoder, and
    optionally the classifier that judges the default model's images.

    Saved by `MMSpecPipeline.save_pretrained`: safetensors + JSON config per component (the
    T5 encoder and its tokenizer as transformers saves them) and a `model_index.json`;
    `DiffusionPipeline.from_pretrained` cannot load the folder: use
    `mmspec.pipelines.load_pipeline` (or this class's `from_pretrained`).

    Args:
        class_names (`list[str]`, *optional*): one name per class of a c2i model.
        default_sampling (`dict`, *optional*): sampling defaults saved with the model.
        metadata (`dict`, *optional*): other `model_index.json` entries (the default model's
            image size and training provenance), kept through `save_pretrained`.
    """

    model_cpu_offload_seq = "text_encoder->transformer->vqvae"
    _optional_components = ["text_encoder", "tokenizer", "classifier", "drafter"]
    declared_components = {
        "transformer": own_module(LlamaGenGPT, LlamaGenConfig, "LlamaGen GPT"),
        "vqvae": VQVAE,
        "text_encoder": transformers_model("T5EncoderModel"),
        "tokenizer": transformers_processor("AutoTokenizer"),
        "classifier": SHAPES_CLASSIFIER,
        "drafter": own_module(DraftHead, DraftHeadConfig, "draft head"),
    }
    config_attributes = {"class_names": "_class_names", "default_sampling": "_saved_sampling"}
    keeps_metadata = True
    cast_after_loading = True
    family_sampling = FAMILY_SAMPLING

    def __init__(self, transformer: LlamaGenGPT, vqvae: LlamaGenVQ, text_encoder=None, tokenizer=None,
                 classifier: ShapesClassifier | None = None, class_names: list[str] | None = None,
                 default_sampling: dict | None = None, metadata: dict | None = None, drafter: DraftHead | None = None):
        super().__init__()
        self.register_modules(transformer=transformer, vqvae=vqvae, text_encoder=text_encoder, tokenizer=tokenizer,
                              classifier=classifier, drafter=None if drafter is None else drafter.bind(transformer))
        self._class_names = self._checked_class_names(class_names, transformer.config)
        self.keep_default_sampling(default_sampling)
        self.metadata = dict(metadata or {})

    @staticmethod
    def _checked_class_names(class_names, config: LlamaGenConfig) -> list[str] | None:
        if class_names is None:
            return None
        if config.model_type != "c2i":
            raise ValueError("class_names are for class-conditional (c2i) models; this LlamaGen is t2i")
        return class_name_list(class_names, config.num_classes)

    # --- what a front end reads ----------------------------------------------------------

    @property
    def condition_kind(self) -> str:
        return "class" if self.transformer.config.model_type == "c2i" else "prompt"

    @property
    def class_names(self) -> list[str] | None:
        """The saved names, or "0", "1", ... for a c2i model saved without names."""
        if self.condition_kind != "class":
            return None
        return list(self._class_names or map(str, range(self.transformer.config.num_classes)))

    @property
    def token_grid(self) -> tuple[int, int]:
        g = self.transformer.config.grid_size
        return g, g

    def max_images_for(self, grid: tuple[int, int]) -> int:
        c = self.transformer.config
        return images_within_budget(c.n_layer, c.kv_heads, c.head_dim, c.cls_token_num + grid[0] * grid[1], self.transformer.dtype)

    # --- loading and saving --------------------------------------------------------------

    @classmethod
    def from_original(cls, gpt_checkpoint, gpt_config: LlamaGenConfig, vq_checkpoint, vq_config: VQConfig | str = "VQ-16",
                      t5: str | Path | None = None) -> "LlamaGenPipeline":
        """Builds a pipeline from the original LlamaGen files.

        Example:
            >>> pipe = LlamaGenPipeline.from_original(  # doctest: +SKIP
            ...     "t2i_XL_stage1_256.pt", LlamaGenConfig.from_name("GPT-XL", model_type="t2i", cls_token_num=120),
            ...     "vq_ds16_t2i.pt", "VQ-16", t5="google/flan-t5-xl")
        """
        if isinstance(vq_config, str):
            vq_config = VQConfig.from_name(vq_config)
        transformer = LlamaGenGPT.from_checkpoint(gpt_checkpoint, gpt_config)
        vqvae = LlamaGenVQ.from_checkpoint(vq_checkpoint, vq_config)
        text_encoder = tokenizer = None
        if t5 is not None:
            from transformers import AutoTokenizer, T5EncoderModel

            text_encoder = T5EncoderModel.from_pretrained(t5).eval()
            tokenizer = AutoTokenizer.from_pretrained(t5)
        return cls(transformer, vqvae, text_encoder, tokenizer)

    # --- the call ----------------------------------------------------------------------

    def check_inputs(self, class_labels, prompt, num_images_per_prompt) -> int:
        """Checks the condition; returns the number of images the call asks for."""
        check_images_per_prompt(num_images_per_prompt)
        if self.condition_kind == "class":
            if prompt is not None:
                raise ValueError("this LlamaGen is class-conditional: pass class_labels, not prompt")
            if class_labels is None:
                raise ValueError("class_labels is required for a class-conditional LlamaGen")
            return len(as_class_labels(class_labels, self.transformer.config.num_classes, self.class_names)) * num_images_per_prompt
        if class_labels is not None:
            raise ValueError("this LlamaGen is text-conditional: pass prompt, not class_labels")
        if self.text_encoder is None:
            raise ValueError("this t2i pipeline has no text encoder; build it with from_original(..., t5=...)")
        return len(as_prompts(prompt)) * num_images_per_prompt

    def encode_condition(self, class_labels, prompt, num_images_per_prompt):
        device = self.transformer.output.weight.device
        if self.condition_kind == "class":
            labels = as_class_labels(class_labels, self.transformer.config.num_classes, self.class_names)
            return labels.repeat_interleave(num_images_per_prompt).to(device)
        enc = self.tokenizer(as_prompts(prompt), max_length=self.transformer.config.cls_token_num, padding="max_length",
                             truncation=True, return_tensors="pt")
        embeds = self.text_encoder(input_ids=enc.input_ids.to(device), attention_mask=enc.attention_mask.to(device)).last_hidden_state
        embeds, mask = left_pad_captions(embeds.float(), enc.attention_mask.to(device))
        return CaptionCondition(embeds.repeat_interleave(num_images_per_prompt, 0), mask.repeat_interleave(num_images_per_prompt, 0))

    @torch.no_grad()
    def __call__(
        self,
        class_labels: int | list[int] | torch.Tensor | None = None,
        prompt: str | list[str] | None = None,
        decoding: str | DecodingConfig = "auto",
        guidance_scale: float | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        guidance_interval: tuple[int, int] | None = None,
        num_images_per_prompt: int = 1,
        generator: torch.Generator | None = None,
        output_type: str = "pil",
        return_dict: bool = True,
        callback_on_step_end: Callable | None = None,
    ):
        """Generates images.

        Args:
            class_labels (`int`, `str`, a list of them or `torch.Tensor`, *optional*): c2i classes,
                by label or by name (`class_names`).
            prompt (`str` or `list[str]`, *optional*): t2i prompts.
            decoding (`str` or `DecodingConfig`, *optional*, defaults to "auto"): any method
                of `mmspec.decoding` ("ar", "sjd", "mc-sjd+gsd", "zipar+mc-sjd", ...).
            guidance_scale (`float`, *optional*): CFG scale; defaults to the pipeline's default
                sampling (4.0 for original checkpoints).
            temperature, top_k, top_p (*optional*): sampling; default as `guidance_scale`.
            guidance_interval (`tuple[int, int]`, *optional*): positions where CFG applies.
            num_images_per_prompt (`int`, *optional*, defaults to 1): images per label / prompt.
            generator (`torch.Generator` or `list[torch.Generator]`, *optional*): the source of
                every random draw; a list gives one per image (image i depends on it alone,
                images are then decoded one by one).
            output_type (`str`, *optional*, defaults to "pil"): "pil", "np", "pt" or "tokens".
            return_dict (`bool`, *optional*, defaults to True): an `ImagePipelineOutput`, else
                a tuple `(images, stats)`.
            callback_on_step_end (`Callable`, *optional*): `fn(pipe, step, tokens_committed, {})`
                after every forward.
        """
        # 1. check inputs
        sampling = sampling_config(self._default_sampling, guidance_scale=guidance_scale, temperature=temperature,
                                   top_k=top_k, top_p=top_p, guidance_interval=guidance_interval)
        num_images = self.check_inputs(class_labels, prompt, num_images_per_prompt)
        decoding, generator = self.check_common(decoding, output_type, generator, num_images, self.token_grid)
        # 2. encode the condition
        condition = self.encode_condition(class_labels, prompt, num_images_per_prompt)
        # 3. the layout, with the codebook for latent-neighbourhood rules
        layout = self.transformer.layout(token_embeddings=self.vqvae.codebook)
        # 4. decode
        tokens, stats = self.decode_tokens(self.transformer, condition, layout, decoding, sampling, generator, callback_on_step_end)
        # 5. detokenize
        images = None if output_type == "tokens" else self.vqvae.decode(tokens)
        # 6. return
        return self.to_output(images, tokens, stats, output_type, return_dict)


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


def load_default(root: str | Path = DEFAULT_ASSETS, device: str | torch.device = "cpu") -> DefaultModel:
    """Loads the embedded default model (or a folder saved from a pipeline loaded from it).

    Args:
        root (`str` or `Path`, *optional*): the folder holding `model_index.json` and
            `transformer/`, `vqvae/`, `classifier/` (defaults to `DEFAULT_ASSETS`).
        device (`str` or `torch.device`, *optional*, defaults to "cpu"): where to put it.
    """
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
