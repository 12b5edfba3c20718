"""What every mmspec image pipeline shares: checking the call (and its limits, which follow
from the model), running the engine under a progress bar with `callback_on_step_end`, and
turning pixels into the requested output."""

from __future__ import annotations

import dataclasses
import math
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from diffusers import DiffusionPipeline

from mmspec.utils.checkpoint import check_finite, check_fits_memory, first_line
from mmspec.utils.json_files import read_json, write_json
from mmspec.decoding.config import DecodingConfig
from mmspec.core.contracts import TokenModel
from mmspec.core.layout import TokenLayout
from mmspec.decoding.generate import as_decoding, generate
from mmspec.core.sampling import SamplingConfig
from mmspec.io.images import to_pil
from mmspec.pipelines.pipeline_output import ImagePipelineOutput

OUTPUT_TYPES = ("pil", "np", "pt", "tokens")
SAMPLING_KEYS = ("guidance_scale", "temperature", "top_k", "top_p")
# CFG scales in use lie between 1 and ~10; far past that, u + s*(c - u) is dominated by
# float rounding of c - u, and at inf or 1e30 it yields a flat image or noise
MAX_GUIDANCE_SCALE = 100.0
# temperatures in use lie between 0 and ~2; past 10 every distribution is close to uniform noise
MAX_TEMPERATURE = 10.0
# keys and values one call may hold (CFG rows included): what bounds images per call
KV_CACHE_BUDGET_BYTES = 8 * 2**30
# the logits and branch q's one forward may hold: what bounds branches and windows
FORWARD_BUDGET_BYTES = 8 * 2**30


def read_index(root: str | Path, cls: type) -> tuple[Path, dict]:
    """The saved pipeline folder (or a shipped model's, by name) and its `model_index.json`,
    checked to name `cls`."""
    from mmspec.assets import pipeline_path

    root = pipeline_path(root)
    if not root.is_dir():
        raise ValueError(f"{root} is not a directory holding a saved pipeline")
    index = read_json(root / "model_index.json", "pipeline")
    if index.get("_class_name") != cls.__name__:
        raise ValueError(f"{root} holds a {index.get('_class_name')!r} pipeline, not a {cls.__name__}")
    return root, index


def pop_dtype(cls: type, kwargs: dict) -> torch.dtype | None:
    """The dtype `from_pretrained(**kwargs)` casts the weights to: `torch_dtype=` (diffusers)
    or `dtype=` (transformers 5). Any other keyword is refused, not ignored."""
    given = {k: kwargs.pop(k) for k in ("torch_dtype", "dtype") if k in kwargs}
    if kwargs:
        raise ValueError(f"{cls.__name__}.from_pretrained got unknown keyword(s) {', '.join(kwargs)}; it takes torch_dtype")
    if len(given) > 1:
        raise ValueError("give torch_dtype or dtype, not both")
    return as_dtype(next(iter(given.values()), None))


def as_dtype(dtype) -> torch.dtype | None:
    """A floating `torch.dtype`, given as one or by its name ("float16", "torch.bfloat16"),
    as diffusers and transformers take `torch_dtype`."""
    if isinstance(dtype, str):
        named = getattr(torch, dtype.removeprefix("torch."), None)
        dtype = named if isinstance(named, torch.dtype) else dtype
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"torch_dtype must be a floating torch.dtype such as torch.bfloat16 or its name ('bfloat16'), got {dtype!r}")
    return dtype


# the sizes of a transformers config (and of its nested text_config, vision_config, ...):
# they must be whole numbers, and they bound the weights `transformers_weight_count` counts
SIZE_KEYS = ("num_hidden_layers", "hidden_size", "intermediate_size", "ffn_dim", "vocab_size", "max_position_embeddings",
             "num_codebooks")
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def transformers_weight_count(config: dict, where: str) -> int:
    """About the weights of a transformers model of `config` (a `config.json` as a dict):
    per block of every (nested) config 4 h^2 of attention and 3 h x ffn of MLP, and the
    embedding and output tables. Sizes that are not whole numbers >= 0 are refused."""
    for key in SIZE_KEYS:
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{where}: {key!r} must be a whole number >= 0, got {value!r}")
    h = config.get("hidden_size") or 0
    ffn = config.get("intermediate_size") or config.get("ffn_dim") or 4 * h
    count = (config.get("num_hidden_layers") or 0) * (4 * h * h + 3 * h * ffn)
    count += (2 * (config.get("vocab_size") or 0) * (config.get("num_codebooks") or 1) + (config.get("max_position_embeddings") or 0)) * h
    return count + sum(transformers_weight_count(sub, where) for sub in config.values() if isinstance(sub, dict))


def check_transformers_config(folder: str | Path, dtype: torch.dtype | None) -> None:
    """A transformers folder's `config.json`, refused in one line when its sizes are not
    whole numbers or its weights would not fit the machine's memory: transformers would
    build the model first (10**9 layers: minutes of growing memory) and fail late."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return  # a hub name, or no model: transformers says what is missing
    config = read_json(path, "transformers model")
    saved = config.get("torch_dtype") or config.get("dtype")
    itemsize = dtype.itemsize if dtype is not None else DTYPE_BYTES.get(saved, 4) if isinstance(saved, str) else 4
    check_fits_memory(transformers_weight_count(config, str(path)) * itemsize, f"the model of {path}",
                      "check the sizes in its config.json")


def load_transformers(load: Callable, folder: str | Path, **kwargs):
    """`load(folder, **kwargs)` (a transformers `from_pretrained`), its multi-line errors (an
    `UnpicklingError` from `weights_only=True`, a damaged safetensors file) cut to one line
    that names the folder. transformers loads `.bin` files with `weights_only=True`. A
    model's `config.json` is checked first (`check_transformers_config`)."""
    from safetensors import SafetensorError

    check_transformers_config(folder, kwargs.get("dtype"))
    try:
        return load(folder, **kwargs)
    except pickle.UnpicklingError:  # its text suggests weights_only=False, which would run the code
        raise ValueError(f"cannot load {folder}: a pickled file there needs arbitrary unpickling; mmspec refuses to "
                         "execute code from a checkpoint: re-save it as safetensors") from None
    except (SafetensorError, OSError, RuntimeError) as err:
        raise ValueError(f"cannot load {folder}: {first_line(err)}") from None


def save_module(folder: Path, module: torch.nn.Module, config: dict) -> None:
    """One of mmspec's own modules as `folder/config.json` and `folder/model.safetensors`."""
    from safetensors.torch import save_file

    write_json(folder / "config.json", config)
    save_file({k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}, str(folder / "model.safetensors"))


def load_module(folder: Path, model_cls, config_cls, what: str):
    """What `save_module` wrote: `model_cls.from_checkpoint` with its `config_cls` from JSON,
    the config's types checked and its size held to the machine's memory before the module
    is built (a config's own `weight_count`, else the module counted on the meta device)."""
    config = config_cls.from_dict(read_json(folder / "config.json", what))
    if config.weight_count() is not None:
        config.check_size()
    else:
        try:
            with torch.device("meta"):
                module = model_cls(config)
        except (RuntimeError, NotImplementedError):
            module = None  # a constructor that computes on its tensors (mel filterbanks); its sizes are widths, not depths
        if module is not None:
            count = sum(t.numel() for t in [*module.parameters(), *module.buffers()])
            check_fits_memory(4 * count, f"the {what} in {folder}", "check the sizes in its config.json")
    return model_cls.from_checkpoint(folder / "model.safetensors", config)


def as_prompts(prompt, name: str = "prompt") -> list[str]:
    """A non-empty list of non-empty strings from a string or a list, else a ValueError."""
    prompts = [prompt] if isinstance(prompt, str) else list(prompt) if isinstance(prompt, (list, tuple)) else []
    if not prompts or any(not isinstance(p, str) or not p.strip() for p in prompts):
        raise ValueError(f"{name} must be a non-empty string or a non-empty list of non-empty strings, got {prompt!r}")
    return prompts


def check_images_per_prompt(num_images_per_prompt) -> None:
    if isinstance(num_images_per_prompt, bool) or not isinstance(num_images_per_prompt, int) or num_images_per_prompt < 1:
        raise ValueError(f"num_images_per_prompt must be an integer >= 1, got {num_images_per_prompt!r}")


def resolve_sampling(family: dict, saved: dict | None = None) -> dict:
    """Every default of `SAMPLING_KEYS`: `SamplingConfig`'s, then the family's recipe, then
    what a saved pipeline records; unknown keys are refused."""
    if saved is not None and not isinstance(saved, dict):
        raise ValueError(f"default_sampling must be a mapping of sampling settings, got {saved!r}")
    saved = dict(saved or {})
    fields = {f.name for f in dataclasses.fields(SamplingConfig)}
    unknown = sorted(set(saved) - fields)
    if unknown:
        raise ValueError(f"default_sampling has unknown keys {', '.join(unknown)}; known: {', '.join(sorted(fields))}")
    base = SamplingConfig()
    return {**{k: getattr(base, k) for k in SAMPLING_KEYS}, **family, **saved}


def sampling_config(defaults: dict, **overrides) -> SamplingConfig:
    """`defaults` updated by the overrides that are not None, checked to be finite and
    at most `MAX_GUIDANCE_SCALE` and `MAX_TEMPERATURE`."""
    sampling = SamplingConfig(**{**defaults, **{k: v for k, v in overrides.items() if v is not None}})
    if not math.isfinite(sampling.guidance_scale) or sampling.guidance_scale > MAX_GUIDANCE_SCALE:
        raise ValueError(f"guidance_scale must be finite and at most {MAX_GUIDANCE_SCALE:g}, got {sampling.guidance_scale}")
    if sampling.temperature > MAX_TEMPERATURE:
        raise ValueError(f"temperature must be at most {MAX_TEMPERATURE:g}, got {sampling.temperature}")
    return sampling


def check_decoding_limits(decoding: str | DecodingConfig, grid: tuple[int, int]) -> DecodingConfig:
    """`decoding` parsed and refused when a window outgrows the token `grid` (rows, cols): a
    draft window past the sequence or a ZipAR window past a row only costs time and memory."""
    config = as_decoding(decoding)
    rows, cols = grid
    if config.method != "ar" and config.window is not None and config.window > rows * cols:
        raise ValueError(f"window {config.window} is longer than the {rows * cols}-token sequence; choose 1 to {rows * cols}")
    if config.zipar_window is not None and config.zipar_window > cols:
        raise ValueError(f"zipar_window {config.zipar_window} is longer than a {cols}-token row; choose 1 to {cols}")
    return config


def check_decoding_memory(decoding: str | DecodingConfig, layout: TokenLayout, rows: int) -> DecodingConfig:
    """`decoding` parsed and refused (one line, before any allocation) when it cannot fit
    the sequence of `layout` or the memory of one forward over `rows` sequences:

    - a draft window longer than the sequence only costs time and memory;
    - a branch takes, per codebook, distinct tokens other than its slot's draft: at most
      `V - 1` of them;
    - one forward feeds up to `extra_positions` inputs a sequence (windows and branch
      nodes), and holds logits `[2 rows, M, K, V]` (CFG rows beside them) and the branch
      q's, float32: `FORWARD_BUDGET_BYTES` bound them (`--branches 10**6` asked for 73 GB).
    """
    from mmspec.decoding.jacobi import extra_positions

    config = as_decoding(decoding)
    T, V, K = layout.length, layout.vocab_size, layout.tokens_per_step
    if config.method != "ar" and config.window is not None and config.window > T:
        raise ValueError(f"window {config.window} is longer than the {T}-step sequence; choose 1 to {T}")
    if config.branches and config.branches >= V:
        raise ValueError(f"branches {config.branches} asks for more candidates per codebook than the {V - 1} tokens besides "
                         f"the draft that this model's {V}-token vocabulary holds; choose 0 to {V - 1}")
    inputs = extra_positions(layout, config)
    needed = 3 * 2 * rows * inputs * K * V * 4  # logits of cond and uncond rows, and the q's behind branch nodes
    if needed > FORWARD_BUDGET_BYTES:
        raise ValueError(f"{config.name} feeds up to {inputs} inputs a forward: {needed / 2**30:.1f} GiB of logits for {rows} "
                         f"sequence(s), more than the {FORWARD_BUDGET_BYTES // 2**30} GiB one call may hold; lower the branches "
                         "or the window, or split the request")
    return config


def images_within_budget(layers: int, kv_heads: int, head_dim: int, slots: int, dtype: torch.dtype) -> int:
    """Images whose keys and values (cond and uncond rows, `slots` positions each) fit
    `KV_CACHE_BUDGET_BYTES`."""
    per_image = 2 * 2 * layers * kv_heads * head_dim * slots * dtype.itemsize  # K and V, 2 rows for CFG
    return max(1, KV_CACHE_BUDGET_BYTES // per_image)


def check_generator(generator, num_images: int) -> torch.Generator | list[torch.Generator] | None:
    """One `torch.Generator`, or a list of one per image."""
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, (list, tuple)) and generator and all(isinstance(g, torch.Generator) for g in generator):
        if len(generator) != num_images:
            raise ValueError(f"generator is a list of {len(generator)} for {num_images} images; give one torch.Generator or one per image")
        return list(generator)
    raise ValueError(f"generator must be a torch.Generator or a list of one per image, got {type(generator).__name__}")


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
    steps 1 (common checks), 4 (decode) and the output of diffusers' `__call__` order, and
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

    @property
    def default_sampling(self) -> dict:
        """`guidance_scale`, `temperature`, `top_k`, `top_p` when a call gives none."""
        raise NotImplementedError

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
        return check_decoding_memory(config, self.decoding_layout(self.token_grid), 1)

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
        limit = self.max_images_for(grid)
        if num_images > limit:
            raise ValueError(
                f"{num_images} images in one call exceed this model's {limit} ({KV_CACHE_BUDGET_BYTES // 2**30} GiB "
                f"of cache at {grid[0]}x{grid[1]} tokens); split the request"
            )
        return check_generator(generator, num_images)

    def check_common(self, decoding, output_type: str, generator, num_images: int, grid: tuple[int, int]):
        """Step 1 for every Jacobi-decoded family: the decoding against the call's token
        `grid`, then `check_batch`; before any work."""
        generator = self.check_batch(output_type, generator, num_images, grid)
        config = check_decoding_limits(decoding, grid)
        return check_decoding_memory(config, self.decoding_layout(grid), num_images), generator

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
        sequence of the run). The bar counts positions per sequence, run after run.

        One generator seeds the whole batch (as in diffusers, image i of a batch then differs
        from the same seed alone). A list of generators decodes image by image, each with its
        own, so image i depends only on generator i; that gives up batching.

        `layout` None: the model's own, `sequence_length` positions long (LPD, which takes
        none); `engine`: further keywords of `mmspec.generate` (LPD's `guidance_schedule`)."""
        if isinstance(generator, list):
            runs = [(condition_row(condition, i), g) for i, g in enumerate(generator)]
        else:
            runs = [(condition, generator)]
        length = self.sequence_length if layout is None else layout.length
        callback = StepCallback(self, callback_on_step_end)
        tokens, stats = [], []
        with self.progress_bar(total=length * len(runs)) as bar:
            for k, (run_condition, run_generator) in enumerate(runs):

                def on_step(done: int, total: int, offset: int = k * length) -> None:
                    bar.update(offset + done - bar.n)
                    callback(done)

                run_tokens, run_stats = generate(token_model, run_condition, decoding, sampling, run_generator, on_step,
                                                 layout=layout, **engine)
                tokens.append(run_tokens)
                stats += run_stats.per_sample()
        return torch.cat(tokens), stats

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


class TransformersImagePipeline(TokenImagePipeline):
    """A pipeline over a transformers model and its processor (Emu3, Janus), saved as
    transformers saves each (`model/`, `processor/`) plus a `model_index.json`.
    Subclasses name the two transformers classes and their sampling recipe."""

    model_class_name: str
    processor_class_name: str
    family_sampling: dict
    model_cpu_offload_seq = "model"
    condition_kind = "prompt"
    # `__init__` keywords of a subclass that `save_pretrained` records in model_index.json
    index_settings: tuple[str, ...] = ()

    def __init__(self, model, processor):
        super().__init__()
        self.register_modules(model=model, processor=processor)

    @classmethod
    def _classes(cls):
        import transformers

        return getattr(transformers, cls.model_class_name), getattr(transformers, cls.processor_class_name)

    @classmethod
    def _load(cls, model_folder: str | Path, processor_folder: str | Path, dtype: torch.dtype | None, settings: dict):
        model_cls, processor_cls = cls._classes()
        model = load_transformers(model_cls.from_pretrained, model_folder, **({} if dtype is None else {"dtype": dtype}))
        check_finite(model.named_parameters(), str(model_folder))
        return cls(model.eval(), load_transformers(processor_cls.from_pretrained, processor_folder), **settings)

    @classmethod
    def from_transformers(cls, name_or_path: str | Path, **kwargs):
        """Builds the pipeline from a transformers checkpoint (a hub name or its local copy),
        its weights cast to `torch_dtype` (or `dtype`) when given; the subclass's
        `index_settings` may be given too."""
        settings = {k: kwargs.pop(k) for k in cls.index_settings if k in kwargs}
        return cls._load(name_or_path, name_or_path, pop_dtype(cls, kwargs), settings)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, **kwargs):
        """Loads a directory written by `save_pretrained`, its weights cast to `torch_dtype`
        (or `dtype`) when given; other keywords are refused."""
        dtype = pop_dtype(cls, kwargs)
        root, index = read_index(pretrained_model_name_or_path, cls)
        return cls._load(root / "model", root / "processor", dtype, {k: index.get(k) for k in cls.index_settings})

    def save_pretrained(self, save_directory: str | Path, **kwargs) -> None:
        root = Path(save_directory)
        self.model.save_pretrained(root / "model")
        self.processor.save_pretrained(root / "processor")
        write_json(root / "model_index.json", {
            "_class_name": type(self).__name__,
            "model": ["transformers", self.model_class_name],
            "processor": ["transformers", self.processor_class_name],
            **{k: getattr(self, k) for k in self.index_settings},
        })

    @property
    def default_sampling(self) -> dict:
        return resolve_sampling(self.family_sampling)

    @property
    def token_vocab_size(self) -> int:
        return self.model.config.text_config.vocab_size

    def max_images_for(self, grid: tuple[int, int]) -> int:
        """Counts the image's tokens; prompts are not known before the call."""
        text = self.model.config.text_config
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        kv_heads = text.num_key_value_heads or text.num_attention_heads
        return images_within_budget(text.num_hidden_layers, kv_heads, head_dim, grid[0] * grid[1], self.dtype)
