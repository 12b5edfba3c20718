"""`generate_text`: mmspec's decoding behind the `generate` a transformers user knows.

The settings are transformers' own (`GenerationConfig` or keyword arguments), resolved as
`model.generate` resolves them: the keyword, else the given or the model's generation
config, else transformers' defaults. The output is `model.generate`'s: the prompt columns,
then the new tokens, padded after each sequence's EOS. Batches of any size run together,
each sequence stopping at its own EOS.

`CUSTOM_GENERATE` is a folder for transformers' `custom_generate`, so that an unmodified
`model.generate(**inputs, custom_generate=CUSTOM_GENERATE, trust_remote_code=True,
decoding="mc-sjd+lookup")` runs this.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from transformers import GenerationConfig

from mmspec.core.processors import MinLength, NoRepeatNGram, RepetitionPenalty
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import as_decoding, generate
from mmspec.decoding.schedules import Raster
from mmspec.decoding.stats import DecodeStats
from mmspec.models.adapters.transformers_lm import VISION_INPUTS, TransformersLM, check_context
from mmspec.utils.checkpoint import check_fits_memory

CUSTOM_GENERATE = str(Path(__file__).parents[1] / "hf_generate")
SETTINGS = ("max_new_tokens", "max_length", "min_new_tokens", "do_sample", "temperature", "top_k", "top_p",
            "repetition_penalty", "no_repeat_ngram_size", "eos_token_id", "pad_token_id")
# transformers settings that change what is sampled and that mmspec does not implement: refused
# unless at their defaults, so that no output silently differs from `model.generate`'s
UNSUPPORTED = {"num_beams": 1, "num_return_sequences": 1, "typical_p": 1.0, "min_p": None, "epsilon_cutoff": 0.0,
               "eta_cutoff": 0.0, "penalty_alpha": None, "bad_words_ids": None, "suppress_tokens": None,
               "begin_suppress_tokens": None, "forced_bos_token_id": None, "forced_eos_token_id": None,
               "prompt_lookup_num_tokens": None, "guidance_scale": None, "sequence_bias": None}
TEXT_DRAFTERS = ("random", "lookup", "phrase-lookup", "previous-step")  # the drafters that need no image axes


def resolve_settings(model, generation_config: GenerationConfig | None, kwargs: dict) -> dict:
    """Every setting as `model.generate` would take it: keyword, config, then default."""
    config = generation_config or model.generation_config
    defaults = GenerationConfig._get_default_generation_params()
    settings = {}
    for name in SETTINGS + tuple(UNSUPPORTED):
        value = kwargs.get(name, getattr(config, name, None))
        settings[name] = defaults.get(name) if value is None else value
    for name, default in UNSUPPORTED.items():
        if settings[name] not in (default, defaults.get(name)):
            raise ValueError(f"generate_text does not implement {name}={settings[name]!r}; leave it at {default!r}")
    return settings


def sampling_of(settings: dict) -> SamplingConfig:
    if not settings["do_sample"]:
        return SamplingConfig(temperature=0.0)
    return SamplingConfig(temperature=float(settings["temperature"]), top_k=int(settings["top_k"] or 0),
                          top_p=float(settings["top_p"]))


def stop_ids(settings: dict) -> list[int]:
    eos = settings["eos_token_id"]
    return [] if eos is None else [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]


def processors_of(settings: dict, eos: list[int]) -> list:
    processors = []
    if settings["repetition_penalty"] != 1.0:
        processors.append(RepetitionPenalty(float(settings["repetition_penalty"])))
    if settings["no_repeat_ngram_size"]:
        processors.append(NoRepeatNGram(int(settings["no_repeat_ngram_size"])))
    if settings["min_new_tokens"] and eos:
        processors.append(MinLength(int(settings["min_new_tokens"]), tuple(eos)))
    return processors


def check_text_decoding(decoding: str | DecodingConfig, drafters: tuple[str, ...] = TEXT_DRAFTERS) -> DecodingConfig:
    """The decoding, or a one-line error when it needs image structure text does not have
    (`drafters`: the draft inits that fit the sequence's layout)."""
    config = as_decoding(decoding)
    if not isinstance(config.scheduler, Raster):
        raise ValueError(f"{config.name} decodes rows or frames of an image side by side; text is one line: "
                         "use auto, ar, keyed, sjd or mc-sjd (with +lookup)")
    if not config.rule.exact:
        raise ValueError(f"{config.rule.name} relaxes acceptance between neighbouring image tokens; text decoding is exact: "
                         "use auto, ar, keyed, sjd or mc-sjd (with +lookup)")
    names = [] if config.drafter is None else config.drafter.name.split("+")
    if not set(names) <= set(drafters):
        raise ValueError(f"draft init {config.drafter.name!r} copies along image axes; this sequence takes {', '.join(drafters)}")
    return config


def check_room(model, batch: int, prompt_length: int, max_new: int) -> None:
    """Refuses, before the layout and the cache are built, a call past the model's
    positions (or its sliding window), or whose static key-value cache would not fit the
    machine's memory: `max_new_tokens=10**9` on a 64-position model grew to 24 GB first."""
    config = model.config.get_text_config()
    length = prompt_length + max_new
    positions = getattr(config, "max_position_embeddings", None)
    if isinstance(positions, int) and length > positions:
        raise ValueError(f"prompt ({prompt_length} tokens) + max_new_tokens ({max_new}) = {length} exceeds the model's "
                         f"{positions} positions; ask for at most {max(positions - prompt_length, 0)} new tokens")
    check_context(config, length)
    heads, layers, width = (getattr(config, k, None) for k in ("num_attention_heads", "num_hidden_layers", "hidden_size"))
    if not all(isinstance(v, int) and v > 0 for v in (heads, layers, width)):
        return  # a config that names its sizes otherwise: the session allocates and reports
    head_dim = getattr(config, "head_dim", None) or width // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    check_fits_memory(2 * layers * batch * kv_heads * head_dim * length * model.dtype.itemsize,
                      f"the key-value cache of {batch} x {length} positions", "lower max_new_tokens or the batch")


class StreamFeed:
    """Feeds a transformers streamer (`put` token ids, then `end`) the committed prefix
    of the single sequence as it grows."""

    def __init__(self, streamer, prompt: torch.Tensor):
        self.streamer, self.sent = streamer, 0
        streamer.put(prompt.cpu())

    def __call__(self, tokens: torch.Tensor) -> None:
        prefix = int((tokens[0] >= 0).long().cumprod(0).sum())
        if prefix > self.sent:
            self.streamer.put(tokens[0, self.sent : prefix].cpu())
            self.sent = prefix


@torch.no_grad()
def generate_text(
    model,
    input_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    *,
    decoding: str | DecodingConfig = "auto",
    generation_config: GenerationConfig | None = None,
    generator: torch.Generator | None = None,
    streamer=None,
    return_stats: bool = False,
    on_step: Callable[[int, int], None] | None = None,
    **kwargs,
) -> torch.Tensor | tuple[torch.Tensor, DecodeStats]:
    """Generates text with `model` (any transformers model of `TransformersLM`'s families)
    as `model.generate` would, decoded by `decoding`.

    Args:
        model: a transformers causal LM or VLM (`LlavaForConditionalGeneration`, ...).
        input_ids (`torch.Tensor`): long `[B, P]`, prompts padded on the left.
        attention_mask (`torch.Tensor`, *optional*): `[B, P]`, 0 at padding.
        decoding (`str` or `DecodingConfig`, defaults to "auto"): "auto" (keyed Jacobi with lookup
            drafts whose window is chosen from the device's cost curve, AR steps among the
            choices: AR's tokens for the seed), "ar", "keyed", "sjd", "mc-sjd", each optionally
            "+lookup" (n-gram drafts from the prompt and text), or "prompt-lookup" (every forward
            redrafts from the prompt and text).
        generation_config (`GenerationConfig`, *optional*): defaults to the model's.
        generator (`torch.Generator` or a list of one per row, *optional*): read once for a
            key per row; every draw is keyed noise of it (`mmspec.generate`).
        streamer (*optional*): a transformers `TextStreamer` / `TextIteratorStreamer`
            (batch 1): fed each forward's newly committed tokens.
        return_stats (`bool`): also return the call's `DecodeStats`.
        on_step (`Callable[[int, int], None]`, *optional*): called after every forward with
            (tokens done per sequence, `max_new_tokens`), as `mmspec.generate` calls it.
        kwargs: generation settings (`max_new_tokens`, `do_sample`, `temperature`, `top_k`,
            `top_p`, `repetition_penalty`, `no_repeat_ngram_size`, `min_new_tokens`,
            `eos_token_id`, `pad_token_id`) and a VLM's image inputs (`pixel_values`,
            `image_grid_thw`, `mm_token_type_ids`, ...).

    Returns:
        long `[B, P + N]` as `model.generate`; with `return_stats`, `(ids, stats)`.

    Example:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> lm = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
        ...                                   num_hidden_layers=1, num_attention_heads=2)).eval()
        >>> ids = generate_text(lm, torch.tensor([[1, 2, 3]]), max_new_tokens=8, do_sample=True,
        ...                     generator=torch.Generator().manual_seed(0))
        >>> ids.shape
        torch.Size([1, 11])
    """
    if input_ids is None or not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise ValueError("input_ids must be a non-empty [batch, prompt length] tensor of token ids")
    vision = {k: kwargs.pop(k) for k in VISION_INPUTS if k in kwargs}
    unknown = set(kwargs) - set(SETTINGS) - set(UNSUPPORTED)
    if unknown:
        raise ValueError(f"generate_text does not take {', '.join(sorted(unknown))}")
    config = check_text_decoding(decoding)
    settings = resolve_settings(model, generation_config, kwargs)
    P = input_ids.shape[1]
    max_new = settings["max_new_tokens"]
    if max_new is None:
        max_new = settings["max_length"] - P
    if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1:
        raise ValueError(f"max_new_tokens must be a whole number >= 1, got {max_new!r}")
    check_room(model, input_ids.shape[0], P, max_new)
    if streamer is not None and input_ids.shape[0] != 1:
        raise ValueError(f"a streamer shows one sequence; got a batch of {input_ids.shape[0]}")
    eos = stop_ids(settings)
    pad = settings["pad_token_id"]
    pad = (eos[0] if eos else 0) if pad is None else int(pad)
    condition = dict(input_ids=input_ids, attention_mask=attention_mask, **vision)
    feed = None if streamer is None else StreamFeed(streamer, input_ids)
    tokens, stats = generate(
        TransformersLM(model, max_new), condition, config, sampling_of(settings), generator, on_step,
        stop_tokens=eos, pad_token_id=pad, processors=processors_of(settings, eos), on_commit=feed,
    )
    if streamer is not None:
        streamer.end()
    ids = torch.cat([input_ids, tokens[:, : int(stats.lengths.max())]], 1)
    return (ids, stats) if return_stats else ids


def generate_from_transformers(model, inputs: torch.Tensor | None = None, **arguments):
    """`model.generate(..., custom_generate=CUSTOM_GENERATE)`: transformers passes every
    argument of its `generate`; those left unset are dropped, those mmspec cannot honour
    are refused."""
    arguments = {k: v for k, v in arguments.items() if v is not None}
    for name in ("logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn", "assistant_model",
                 "negative_prompt_ids", "negative_prompt_attention_mask"):
        if name in arguments:
            raise ValueError(f"mmspec's generate does not take {name}; drop it or use transformers' own generate")
    arguments.pop("synced_gpus", None)
    arguments.pop("use_cache", None)
    input_ids = arguments.pop("input_ids", inputs)
    return generate_text(model, input_ids, **arguments)
