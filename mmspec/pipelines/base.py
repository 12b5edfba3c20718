"""The bases of mmspec's pipelines: `MMSpecPipeline` (declared components, the generic
`save_pretrained` / `from_pretrained`, sampling defaults, the engine run under a progress bar)
and, over it, `TokenImagePipeline` (the checks and outputs of image pipelines) and
`TransformersImagePipeline` (an image generator over a transformers model and its processor)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from diffusers import DiffusionPipeline

from mmspec.core.bounds import KV_CACHE_BUDGET_BYTES, check_items_per_call, images_within_budget
from mmspec.core.contracts import TokenModel
from mmspec.core.layout import TokenLayout
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from mmspec.io.images import to_pil
from mmspec.pipelines.checks import OUTPUT_TYPES, check_decoding_limits, check_decoding_memory, check_generator, resolve_sampling
from mmspec.pipelines.components import Component, check_entry
from mmspec.pipelines.loading import pop_dtype, read_index
from mmspec.pipelines.pipeline_output import ImagePipelineOutput
from mmspec.utils.json_files import write_json


def attention_heads(config) -> int:
    """The attention heads whose scores a forward of the model of `config` holds at once
    (`check_decoding_memory` counts them): all of them under transformers' eager kernel,
    1 under SDPA, which tiles them (mmspec's own networks call SDPA; in half precision on a
    CPU, they and the SDPA kernel go through `mmspec.models.cache.attention`, whose query
    chunks hold at most `CHUNK_SCORES` scores)."""
    config = getattr(config, "text_config", None) or config
    if getattr(config, "_attn_implementation", None) != "eager":
        return 1
    return max(1, int(getattr(config, "num_attention_heads", 1) or 1))


def condition_row(condition, i: int):
    """Row i of a batched condition (a tensor `[B, ...]` or a dataclass of them), batch kept."""
    if isinstance(condition, torch.Tensor):
        return condition[i:i + 1]
    return dataclasses.replace(condition, **{
        f.name: condition_row(value, i) for f in dataclasses.fields(condition) if (value := getattr(condition, f.name)) is not None
    })


class StepCallback:
    """A call's `callback_on_step_end(pipe, step, tokens_committed, {})`, as diffusers calls it
    after every step: called with the positions done per sequence after every forward, `step`
    counting the call's forwards from 0 (over every run of the call)."""

    def __init__(self, pipe, callback: Callable | None):
        self.pipe, self.callback, self.step = pipe, callback, 0

    def __call__(self, done: int) -> None:
        if self.callback is not None:
            self.callback(self.pipe, self.step, done, {})
        self.step += 1


class MMSpecPipeline(DiffusionPipeline):
    """The base of every mmspec pipeline, in the spirit of diffusers' `DiffusionPipeline`:
    each component is saved in its own subfolder and named in `model_index.json` by
    `[module, class]`, the pipeline's config values beside them; `save_pretrained` and
    `from_pretrained` walk the components the subclass declares. (Diffusers' own methods save
    only its `ModelMixin`s; ours are plain `nn.Module`s that load original checkpoints, and
    transformers models.) `progress_bar`, `.to()`, `.device` and `.dtype` are diffusers'.

    A subclass declares:

        declared_components (`dict[str, Component]`): every component by its `__init__`
            keyword, in the order `model_index.json` lists them; those in `_optional_components`
            may be None (then not saved) and load when their subfolder exists.
        config_attributes (`dict[str, str]`): the `__init__` keywords saved in `model_index.json`,
            each with the attribute that holds its value as the pipeline was given it.
        keeps_metadata (`bool`): whether the other `model_index.json` entries (training
            provenance, the default model's image size) travel as `metadata=` and are saved again.
        cast_after_loading (`bool`): True: every component loads as saved and `torch_dtype`
            casts the whole pipeline; False: `torch_dtype` goes to each component's loader
            (transformers models cast; mmspec's codecs and classifiers stay float32).
        family_sampling (`dict`): the family's sampling recipe over `SamplingConfig`'s defaults.

    Example:
        >>> from mmspec.pipelines.llamagen import LlamaGenPipeline
        >>> pipe = LlamaGenPipeline.from_pretrained("default")
        >>> pipe.save_pretrained("my-model")  # doctest: +SKIP
        >>> list(pipe.declared_components)
        ['transformer', 'vqvae', 'text_encoder', 'tokenizer', 'classifier']
    """

    declared_components: dict[str, Component] = {}
    config_attributes: dict[str, str] = {}
    keeps_metadata = False
    cast_after_loading = False
    family_sampling: dict = {}

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, **kwargs):
        """Loads a folder written by `save_pretrained` (or a shipped model by its name, as
        `mmspec.assets.pipeline_path` knows them), its weights cast to `torch_dtype` (or
        `dtype`) when given; other keywords are refused. Each component loads as its class
        declares, after the class `model_index.json` names for it is checked to be that one."""
        dtype = pop_dtype(cls, kwargs)
        root, index = read_index(pretrained_model_name_or_path, cls)
        components = {}
        for name, component in cls.declared_components.items():
            if name in cls._optional_components and not (root / name).is_dir():
                continue
            if name in index:  # absent in folders saved before it was recorded (a t2i model's text encoder)
                check_entry(index[name], component, name, root / "model_index.json")
            components[name] = component.load(root / name, None if cls.cast_after_loading else dtype)
        settings = {key: index[key] for key in cls.config_attributes if key in index}
        if cls.keeps_metadata:
            known = {"_class_name", *cls.declared_components, *cls.config_attributes}
            settings["metadata"] = {key: value for key, value in index.items() if key not in known}
        try:
            pipe = cls(**components, **settings)
        except ValueError as err:  # a value model_index.json gave (a string guidance scale, a bad class name list)
            raise ValueError(f"{root / 'model_index.json'}: {err}") from None
        return pipe.to(dtype) if cls.cast_after_loading and dtype is not None else pipe

    def save_pretrained(self, save_directory: str | Path, **kwargs) -> None:
        """Writes every component that is not None to its subfolder and `model_index.json`:
        the pipeline's class, each component's `[module, class]`, the config values and, where
        the pipeline keeps it, its metadata."""
        root = Path(save_directory)
        index = {"_class_name": type(self).__name__}
        for name, component in self.declared_components.items():
            value = getattr(self, name)
            if value is not None:
                component.save(value, root / name)
                index[name] = component.entry
        index.update({key: getattr(self, attribute) for key, attribute in self.config_attributes.items()})
        if self.keeps_metadata:
            index.update(self.metadata)
        write_json(root / "model_index.json", index)

    def keep_default_sampling(self, saved: dict | None) -> None:
        """Sets `default_sampling`: `SamplingConfig`'s defaults, then `family_sampling`, then
        `saved` (what `model_index.json` records, kept as given to be saved again)."""
        self._saved_sampling = dict(saved or {})
        self._default_sampling = resolve_sampling(self.family_sampling, self._saved_sampling)

    @property
    def default_sampling(self) -> dict:
        """`guidance_scale`, `temperature`, `top_k`, `top_p` when a call gives none."""
        return dict(self._default_sampling)

    use_drafter = True  # False: the pipeline's learned draft head (its `drafter`) is not used

    def with_drafter(self, decoding):
        """`decoding` with the pipeline's learned draft head, when it has one, `use_drafter`
        is on and the config names no head of its own."""
        head = getattr(self, "drafter", None)
        if head is None or not self.use_drafter or not isinstance(decoding, DecodingConfig) or decoding.head is not None:
            return decoding
        return dataclasses.replace(decoding, head=head)

    def decode_tokens(
        self,
        token_model: TokenModel,
        condition: Any,
        layout: TokenLayout | None,
        decoding: DecodingConfig,
        sampling: SamplingConfig,
        generator: torch.Generator | list[torch.Generator] | None,
        callback_on_step_end: Callable | None,
        **engine,
    ):
        """Runs the engine under a progress bar; calls `callback_on_step_end(pipe, step,
        tokens_committed, {})` after every forward, as diffusers calls it after every step
        (`step` counts the call's forwards from 0, `tokens_committed` the positions done per
        sequence). The bar counts positions per sequence.

        One generator seeds the whole batch: a key per image, drawn in turn. A list of
        generators gives image i the key of generator i, so image i equals the same image
        decoded alone with generator i; the batch still decodes together.

        `layout` None: the model's own, `sequence_length` positions long (LPD, which takes
        none); `engine`: further keywords of `mmspec.generate` (LPD's `guidance_schedule`)."""
        length = self.sequence_length if layout is None else layout.length
        decoding = self.with_drafter(decoding)
        callback = StepCallback(self, callback_on_step_end)
        with self.progress_bar(total=length) as bar:

            def on_step(done: int, total: int) -> None:
                bar.update(done - bar.n)
                callback(done)

            tokens, stats = generate(token_model, condition, decoding, sampling, generator, on_step, layout=layout, **engine)
        return tokens, stats.per_sample()


class TokenImagePipeline(MMSpecPipeline):
    """Base of the image pipelines: a TokenModel plus a codec, decoded by `mmspec.decoding`.

    Subclasses encode their condition and decode tokens to pixels; this class runs
    step 1 (common checks) and the output of diffusers' `__call__` order (step 4,
    `decode_tokens`, is `MMSpecPipeline`'s), and
    says what a front end needs without reaching into the components: `condition_kind`,
    `class_names`, `token_grid`, `sequence_length`, `default_sampling`,
    `max_images_per_call` and `check_decoding`. `device`, `dtype` and `to()` are diffusers'.
    """

    condition_kind: str  # "class" (class_labels=) or "prompt" (prompt=)
    default_decoding = "auto"  # what the CLI runs without --decoding

    @property
    def class_names(self) -> list[str] | None:
        """The name of each class label; None for prompt pipelines."""
        return None

    @property
    def token_grid(self) -> tuple[int, int]:
        """`(rows, cols)` of the generated token grid at the default size."""
        raise NotImplementedError

    @property
    def sequence_length(self) -> int:
        """Tokens generated per image at the default size (`rows * cols`)."""
        rows, cols = self.token_grid
        return rows * cols

    def max_images_for(self, grid: tuple[int, int]) -> int:
        """Images of `grid` tokens whose cache fits `KV_CACHE_BUDGET_BYTES`."""
        raise NotImplementedError

    @property
    def max_images_per_call(self) -> int:
        """Images one call may generate at the default size."""
        return self.max_images_for(self.token_grid)

    def check_decoding(self, decoding: str | DecodingConfig) -> DecodingConfig:
        """`decoding` as a `DecodingConfig`, refused (one-line `ValueError`) when its window
        is longer than `sequence_length` or its ZipAR window longer than a row.

        Example:
            >>> pipe.check_decoding("zipar+mc-sjd").zipar_window  # doctest: +SKIP
            8
        """
        config = check_decoding_limits(decoding, self.token_grid)
        return check_decoding_memory(config, self.decoding_layout(self.token_grid), 1, self.attention_heads, device=self.device)

    @property
    def attention_heads(self) -> int:
        """The generator's attention heads held at once (`attention_heads` of its
        `transformer`, or of its `model`)."""
        module = getattr(self, "transformer", None)
        module = getattr(self, "model", None) if module is None else module
        return 1 if module is None else attention_heads(module.config)

    @property
    def token_vocab_size(self) -> int:
        """Ids the generator's head scores at every position (V of the logits)."""
        return self.transformer.config.vocab_size

    def decoding_layout(self, grid: tuple[int, int]) -> TokenLayout:
        """The layout of a call at `grid` tokens, as far as bounds need it (length, axes, V)."""
        return TokenLayout.grid(grid, self.token_vocab_size)

    def check_batch(self, output_type: str, generator, num_images: int, grid: tuple[int, int]):
        """The output type, the number of images at `grid` tokens and the generator(s);
        returns the generator(s)."""
        if output_type not in OUTPUT_TYPES:
            raise ValueError(f"unknown output_type {output_type!r}; choose from {', '.join(OUTPUT_TYPES)}")
        check_items_per_call(num_images, self.max_images_for(grid), "images",
                             f"{KV_CACHE_BUDGET_BYTES // 2**30} GiB of cache at {grid[0]}x{grid[1]} tokens")
        return check_generator(generator, num_images)

    def check_common(self, decoding, output_type: str, generator, num_images: int, grid: tuple[int, int]):
        """Step 1 for every Jacobi-decoded family: the decoding against the call's token
        `grid`, then `check_batch`; before any work."""
        generator = self.check_batch(output_type, generator, num_images, grid)
        config = check_decoding_limits(decoding, grid)
        return (check_decoding_memory(config, self.decoding_layout(grid), num_images, self.attention_heads, device=self.device),
                generator)

    @staticmethod
    def to_output(images: torch.Tensor | None, tokens: torch.Tensor, stats: list, output_type: str, return_dict: bool):
        """`images [B, 3, H, W]` in [-1, 1] -> the requested output type; `stats` one per image."""
        if output_type == "tokens":
            out = tokens
        elif output_type == "pt":
            out = ((images.float() + 1) / 2).clamp(0, 1).cpu()
        elif output_type == "np":
            out = ((images.float() + 1) / 2).clamp(0, 1).permute(0, 2, 3, 1).cpu().numpy().astype(np.float32)
        else:
            out = to_pil(images)
        if not return_dict:
            return out, stats
        return ImagePipelineOutput(images=out, stats=stats, tokens=tokens)


def to_signed_pixels(pixels: torch.Tensor, image_processor) -> torch.Tensor:
    """VQ decoder output `[B, 3, H, W]`, normalised with the image processor's mean and std
    (what its `postprocess` undoes), -> floats in [-1, 1]."""
    x = pixels.float()
    if image_processor.do_normalize:
        mean = torch.tensor(image_processor.image_mean, device=x.device).view(1, -1, 1, 1)
        std = torch.tensor(image_processor.image_std, device=x.device).view(1, -1, 1, 1)
        x = x * std + mean  # [0, 1]
    return (x * 2 - 1).clamp(-1, 1)


class TransformersImagePipeline(TokenImagePipeline):
    """A pipeline over a transformers model and its processor (Emu3, Janus), saved as
    transformers saves each (`model/`, `processor/`) plus a `model_index.json`.
    Subclasses declare the two (`transformers_model`, `transformers_processor`) and their
    sampling recipe (`family_sampling`)."""

    model_cpu_offload_seq = "model"
    condition_kind = "prompt"

    def __init__(self, model, processor):
        super().__init__()
        self.register_modules(model=model, processor=processor)
        self.keep_default_sampling(None)

    @classmethod
    def from_transformers(cls, name_or_path: str | Path, **kwargs):
        """Builds the pipeline from a transformers checkpoint (a hub name or its local copy)
        that holds both components, its weights cast to `torch_dtype` (or `dtype`) when given;
        the subclass's `config_attributes` may be given too."""
        settings = {k: kwargs.pop(k) for k in cls.config_attributes if k in kwargs}
        dtype = pop_dtype(cls, kwargs)
        components = {name: component.load(name_or_path, dtype) for name, component in cls.declared_components.items()}
        return cls(**components, **settings)

    @property
    def token_vocab_size(self) -> int:
        return self.model.config.text_config.vocab_size

    def max_images_for(self, grid: tuple[int, int]) -> int:
        """Counts the image's tokens; prompts are not known before the call."""
        text = self.model.config.text_config
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        kv_heads = text.num_key_value_heads or text.num_attention_heads
        return images_within_budget(text.num_hidden_layers, kv_heads, head_dim, grid[0] * grid[1], self.dtype)
