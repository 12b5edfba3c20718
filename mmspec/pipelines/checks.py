"""Step 1 of every pipeline call: its arguments checked before any work, and the limits that
follow from the model and the machine (images per call, the memory of one forward), whose
budgets `mmspec.core.bounds` states for every family.
Each refusal is one `ValueError` that names the argument and the way out."""

from __future__ import annotations

import dataclasses
import math

import torch

from mmspec.core.bounds import FORWARD_BUDGET_BYTES, forward_bytes
from mmspec.core.device import device_profile
from mmspec.core.layout import TokenLayout
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import as_decoding

OUTPUT_TYPES = ("pil", "np", "pt", "tokens")
SAMPLING_KEYS = ("guidance_scale", "temperature", "top_k", "top_p")
# CFG scales in use lie between 1 and ~10; far past that, u + s*(c - u) is dominated by
# float rounding of c - u, and at inf or 1e30 it yields a flat image or noise
MAX_GUIDANCE_SCALE = 100.0
# temperatures in use lie between 0 and ~2; past 10 every distribution is close to uniform noise
MAX_TEMPERATURE = 10.0


def as_prompts(prompt, name: str = "prompt") -> list[str]:
    """A non-empty list of non-empty strings from a string or a list, else a ValueError."""
    prompts = [prompt] if isinstance(prompt, str) else list(prompt) if isinstance(prompt, (list, tuple)) else []
    if not prompts or any(not isinstance(p, str) or not p.strip() for p in prompts):
        raise ValueError(f"{name} must be a non-empty string or a non-empty list of non-empty strings, got {prompt!r}")
    return prompts


def class_name_list(class_names, classes: int | None = None) -> list[str] | None:
    """A class pipeline's `class_names` (None: unnamed) as a list of distinct non-empty
    strings, one per class when the model says how many (`classes`): a name given twice
    would make `--classes` pick one of two classes silently."""
    if class_names is None:
        return None
    if not isinstance(class_names, (list, tuple)) or not all(isinstance(n, str) and n.strip() for n in class_names):
        raise ValueError(f"class_names must be a list of non-empty strings, got {class_names!r}")
    twice = next((n for i, n in enumerate(class_names) if n in class_names[:i]), None)
    if twice is not None:
        raise ValueError(f"class_names names {twice!r} twice; each class needs a name of its own")
    if classes is not None and len(class_names) != classes:
        raise ValueError(f"class_names has {len(class_names)} names for the model's {classes} classes; give one per class")
    return list(class_names)


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
    resolved = {**{k: getattr(base, k) for k in SAMPLING_KEYS}, **family, **saved}
    SamplingConfig(**resolved)  # a string scale or a negative temperature: refused when loaded, not at the first call
    return resolved


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
    """`decoding` parsed and refused when its ZipAR window outgrows a row of the token `grid`
    (rows, cols): it would only cost time and memory. The draft window is checked against
    the sequence by `check_decoding_memory`."""
    config = as_decoding(decoding)
    cols = grid[1]
    if config.zipar_window is not None and config.zipar_window > cols:
        raise ValueError(f"zipar_window {config.zipar_window} is longer than a {cols}-token row; choose 1 to {cols}")
    return config


def check_decoding_memory(decoding: str | DecodingConfig, layout: TokenLayout, rows: int, heads: int = 1, *,
                          device: torch.device | str) -> DecodingConfig:
    """`decoding` parsed and refused (one line, before any allocation) when it cannot fit
    the sequence of `layout` or the memory of one forward over `rows` sequences on `device`
    (the pipeline's: its profile decides the branches auto may add, as the decode's does):

    - a draft window longer than the sequence only costs time and memory;
    - a drafter that copies along an axis the layout does not have (`previous-frame` for
      a line of steps) would fail at the first draft;
    - a branch takes, per codebook, distinct tokens other than its slot's draft: at most
      `V - 1` of them;
    - one forward feeds up to `extra_positions` inputs a sequence (windows and branch
      nodes), and holds logits `[2 rows, M, K, V]` (CFG rows beside them), the branch
      q's and, per attention head (`heads`, the model's), the scores of those inputs over
      the sequence's keys, float32: `FORWARD_BUDGET_BYTES` bounds them (`--branches 10**6`
      asked for 73 GB; 256 spoken words with 64 branches and a window of 51 were killed).
    """
    from mmspec.decoding.loop.jacobi import extra_positions

    config = as_decoding(decoding)
    T, V, K = layout.length, layout.vocab_size, layout.tokens_per_step
    if config.method != "ar" and config.window is not None and config.window > T:
        raise ValueError(f"window {config.window} is longer than the {T}-{'token' if K == 1 else 'step'} sequence; "
                         f"choose 1 to {T}")
    drafters = [] if config.drafter is None else getattr(config.drafter, "drafters", (config.drafter,))
    foreign = next((d for d in drafters if getattr(d, "axis", None) is not None and d.axis not in layout.axes), None)
    if foreign is not None:
        raise ValueError(f"draft init {foreign.name!r} copies along {foreign.axis!r}; this model's tokens lie on the axes "
                         f"{', '.join(layout.axes)}")
    if config.branches and config.branches >= V:
        raise ValueError(f"branches {config.branches} asks for more candidates per codebook than the {V - 1} tokens besides "
                         f"the draft that this model's {V}-token vocabulary holds; choose 0 to {V - 1}")
    inputs = extra_positions(layout, config, device_profile(device))
    needed = forward_bytes(rows, inputs, K, V, keys=layout.length + inputs, heads=heads)
    if needed > FORWARD_BUDGET_BYTES:
        raise ValueError(f"{config.name} feeds up to {inputs} inputs a forward: {needed / 2**30:.1f} GiB of logits and "
                         f"attention scores for {rows} "
                         f"sequence(s), more than the {FORWARD_BUDGET_BYTES // 2**30} GiB one call may hold; lower the branches "
                         "or the window, or split the request")
    return config


def check_generator(generator, num_images: int) -> torch.Generator | list[torch.Generator] | None:
    """One `torch.Generator`, or a list of one per image."""
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, (list, tuple)) and generator and all(isinstance(g, torch.Generator) for g in generator):
        if len(generator) != num_images:
            raise ValueError(f"generator is a list of {len(generator)} for {num_images} images; give one torch.Generator or one per image")
        return list(generator)
    raise ValueError(f"generator must be a torch.Generator or a list of one per image, got {type(generator).__name__}")

