"""Captioning: image(s) and a prompt in, text out, through a transformers VLM (LLaVA)
decoded by `mmspec.pipelines.text.generate_text`.

The shipped captioner (`mmspec/assets/captioner`, `scripts/train_captioner.py`) is a
tiny LLaVA trained on Shapes images; any saved `CaptioningPipeline` folder (`model/`,
`processor/`, `model_index.json`) loads the same way.

Example:
    >>> from mmspec.assets import CAPTIONER_ASSETS
    >>> from mmspec.pipelines.captioning import CaptioningPipeline
    >>> from mmspec.datasets.shape_captions import load_scenes
    >>> from mmspec.io.images import to_pil
    >>> pipe = CaptioningPipeline.from_pretrained(CAPTIONER_ASSETS)
    >>> images, scenes = load_scenes("heldout", 1)
    >>> out = pipe(to_pil(images), decoding="mc-sjd+lookup")  # doctest: +SKIP
    >>> out.text[0]  # doctest: +SKIP
    'this picture shows a large red circle in the centre . ...'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import torch
from diffusers.utils import BaseOutput
from PIL import Image

from mmspec.assets import CAPTIONER_ASSETS
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.drafts import Lookup
from mmspec.core.layout import TokenLayout
from mmspec.pipelines.base import MMSpecPipeline, StepCallback, attention_heads
from mmspec.pipelines.checks import as_prompts, check_decoding_memory, check_generator
from mmspec.pipelines.components import transformers_model, transformers_processor

DEFAULT_PROMPT = "describe the picture ."  # when a saved pipeline names none
# the engine's decodings for text, as offered (prompt-lookup: every forward redrafts from the prompt and text);
# `caption_decoding` takes every name of the grammar that decodes text (`check_text_decoding`)
TEXT_DECODINGS = ("auto", "ar", "keyed", "keyed+lookup", "sjd", "mc-sjd", "lookup", "mc-sjd+lookup", "prompt-lookup")
MAX_TEMPERATURE = 10.0


def caption_decoding(decoding: str | DecodingConfig) -> DecodingConfig:
    """`decoding` parsed by the one grammar (`mmspec.decoding.names`) and checked as text
    decoding (`mmspec.pipelines.text.check_text_decoding`: raster, exact, drafters without
    image axes). A name outside that family is a one-line error listing `TEXT_DECODINGS`
    (with the reason when the name parses); a config gets the text check's own error."""
    from mmspec.decoding.generate import as_decoding
    from mmspec.pipelines.text import check_text_decoding

    if isinstance(decoding, DecodingConfig):
        return check_text_decoding(decoding)
    choices = f"choose from {', '.join(TEXT_DECODINGS)}"
    try:
        config = as_decoding(decoding)
    except ValueError:
        raise ValueError(f"unknown decoding {decoding!r} for text; {choices}") from None
    try:
        return check_text_decoding(config)
    except ValueError as err:
        raise ValueError(f"unknown decoding {decoding!r} for text ({err}); {choices}") from None


@dataclass
class CaptioningPipelineOutput(BaseOutput):
    """Attributes:
    text (`list[str]`): one caption per image.
    tokens (`torch.Tensor`): long `[B, N]`, the new token ids (padding after an EOS).
    stats (`list[DecodeStats]`): one per caption (`DecodeStats.per_sample()`: its
        `commit_iteration [1, max_new_tokens]`, the forward that committed each new token;
        its own `forward_passes`, to its last commit; the batch's wall time).
    """

    text: list[str]
    tokens: torch.Tensor
    stats: list


def as_images(images) -> list[Image.Image]:
    """A non-empty list of PIL images from one image or a list of them."""
    listed = [images] if isinstance(images, Image.Image) else list(images) if isinstance(images, (list, tuple)) else []
    if not listed or not all(isinstance(im, Image.Image) for im in listed):
        raise ValueError(f"images must be a PIL image or a non-empty list of PIL images, got {type(images).__name__}")
    return listed


class CaptioningPipeline(MMSpecPipeline):
    """A VLM (`LlavaForConditionalGeneration`) and its `LlavaProcessor`, decoded by mmspec.

    Args:
        model (`LlavaForConditionalGeneration`): the VLM, in eval mode.
        processor (`LlavaProcessor`): turns images and prompts into `pixel_values` and ids.
        default_prompt (`str`, *optional*): the prompt of a call that gives none (saved in
            `model_index.json`); the shipped captioner's carries an example caption whose
            sentence pattern its answers follow.
        draft_texts (`list[str]`, *optional*): texts "prompt-lookup" may copy its drafts
            from besides the prompt (saved in `model_index.json`): the shipped captioner's
            are one caption in each of its sentence patterns, so the patterns the prompt's
            example does not show are drafted too. They change no output.

    Images are converted to RGB and resized (bicubic) to the vision tower's input size when
    they differ from it, as CLIP's processors do. Saved as transformers saves each
    component (`model/`, `processor/`) plus a `model_index.json`.
    """

    model_cpu_offload_seq = "model"
    declared_components = {
        "model": transformers_model("LlavaForConditionalGeneration"),
        "processor": transformers_processor("LlavaProcessor"),
    }
    config_attributes = {"default_prompt": "default_prompt", "draft_texts": "draft_texts"}
    condition_kind = "image"

    def __init__(self, model, processor, default_prompt: str = DEFAULT_PROMPT, draft_texts: list[str] | None = None):
        super().__init__()
        self.register_modules(model=model, processor=processor)
        self.default_prompt = as_prompts(default_prompt, "default_prompt")[0]
        self.draft_texts = list(draft_texts or [])

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path = CAPTIONER_ASSETS, **kwargs) -> "CaptioningPipeline":
        """Loads a folder written by `save_pretrained` (the shipped captioner by default),
        weights cast to `torch_dtype` (or `dtype`) when given; other keywords are refused."""
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)

    def resolve_decoding(self, decoding: str | DecodingConfig) -> str | DecodingConfig:
        """Where the pipeline has `draft_texts`: prompt-lookup ("prompt-lookup", or a config
        that redrafts with lookup) drafts from them beside the prompt, and auto with its
        first drafts unset redrafts with phrase-lookup in them (captions repeat those texts
        with words changed: lookup there is what pays, not the model's own last guesses).
        Every other decoding as given."""
        config = caption_decoding(decoding)
        if not self.draft_texts:
            return decoding
        if config.method == "auto" and config.init is None:
            return replace(config, init=Lookup(first=True, substitutions=True, reference=self.draft_reference), redraft=True)
        if not (config.redraft and isinstance(config.drafter, Lookup) and not config.drafter.reference):
            return decoding
        return replace(config, init=replace(config.drafter, reference=self.draft_reference))

    @cached_property
    def draft_reference(self) -> tuple[int, ...]:
        """`draft_texts` as token ids, -1 between texts, tokenised once."""
        tokenizer = self.processor.tokenizer
        ids = [t for text in self.draft_texts for t in tokenizer(text, add_special_tokens=False).input_ids + [-1]]
        return tuple(ids[:-1])

    @property
    def image_size(self) -> int:
        """Pixels per side the vision tower takes."""
        return self.model.config.vision_config.image_size

    @property
    def max_new_tokens(self) -> int:
        """Room left in the model's positions after the image tokens (the prompt's length
        is checked per call)."""
        return self.model.config.text_config.max_position_embeddings - self.model.config.image_seq_length - 1

    def check_inputs(self, images, prompt, max_new_tokens, decoding, do_sample, temperature, top_k, top_p):
        """The images and one prompt per image, or a one-line ValueError for any argument."""
        images = as_images(images)
        prompts = as_prompts(self.default_prompt if prompt is None else prompt)
        if len(prompts) == 1:
            prompts = prompts * len(images)
        if len(prompts) != len(images):
            raise ValueError(f"got {len(prompts)} prompts for {len(images)} images; give one prompt, or one per image")
        self.check_generation(max_new_tokens, decoding, do_sample, temperature, top_k, top_p)
        return images, prompts

    def check_generation(self, max_new_tokens, decoding, do_sample, temperature=None, top_k=None, top_p=None) -> None:
        """Refuses generation settings this model cannot serve, in one line."""
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or not 1 <= max_new_tokens <= self.max_new_tokens:
            raise ValueError(f"max_new_tokens must be an integer from 1 to {self.max_new_tokens}, got {max_new_tokens!r}")
        caption_decoding(decoding)
        if not isinstance(do_sample, bool):
            raise ValueError(f"do_sample must be True or False, got {do_sample!r}")
        if temperature is not None and not 0 < temperature <= MAX_TEMPERATURE:
            raise ValueError(f"temperature must be in (0, {MAX_TEMPERATURE:g}], got {temperature}")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0):
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {top_k!r}")
        if top_p is not None and not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")

    def encode(self, images: list[Image.Image], prompts: list[str]) -> dict[str, torch.Tensor]:
        """Processor inputs: left-padded `input_ids`, `attention_mask`, `pixel_values`."""
        size = (self.image_size, self.image_size)
        rgb = [im.convert("RGB") for im in images]
        rgb = [im if im.size == size else im.resize(size, Image.BICUBIC) for im in rgb]
        texts = [f"{self.processor.image_token}{p}" for p in prompts]
        inputs = self.processor(images=rgb, text=texts, padding=True, padding_side="left", return_tensors="pt")
        return {k: v.to(self.device) for k, v in inputs.items()}

    @torch.no_grad()
    def __call__(
        self,
        images,
        prompt: str | list[str] | None = None,
        decoding: str | DecodingConfig = "auto",
        max_new_tokens: int = 64,
        do_sample: bool = False,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        generator: torch.Generator | list[torch.Generator] | None = None,
        streamer=None,
        return_dict: bool = True,
        callback_on_step_end: Callable | None = None,
    ):
        """Captions `images`.

        Args:
            images (`PIL.Image.Image` or `list`): the images, any size (resized to the
                model's input size).
            prompt (`str` or `list[str]`, *optional*): the instruction after the image,
                one for all or one per image; defaults to `default_prompt`.
            decoding (`str` or `DecodingConfig`, *optional*, defaults to "auto"): "auto"
                (prompt-lookup whose window, or an AR step, is chosen before each forward
                from the device's cost curve), "ar", "sjd", "mc-sjd", "lookup" (sjd with
                n-gram lookup first drafts), "mc-sjd+lookup", a `DecodingConfig` (another
                window), or "prompt-lookup" (every forward redrafts from the prompt and text);
                every one gives the model's own output (the greedy text, or samples of its
                distribution).
            max_new_tokens (`int`, *optional*, defaults to 64): at most this many tokens
                per caption; each stops at its EOS.
            do_sample (`bool`, *optional*, defaults to False): sample instead of greedy.
            temperature, top_k, top_p (*optional*): sampling filters, as in transformers.
            generator (`torch.Generator` or `list[torch.Generator]`, *optional*): the source of
                every random draw; a list gives one per image (images are then captioned one by one).
            streamer (*optional*): a transformers streamer (`TextStreamer`,
                `TextIteratorStreamer`); batch 1 only.
            return_dict (`bool`, *optional*, defaults to True): a
                `CaptioningPipelineOutput`, else a tuple `(text, stats)`, `stats` one
                `DecodeStats` per image.
            callback_on_step_end (`Callable`, *optional*): `fn(pipe, step, tokens_committed, {})`
                after every forward (`step` counts the call's forwards from 0,
                `tokens_committed` the new tokens done per caption of the run).

        Example:
            >>> pipe = CaptioningPipeline.from_pretrained()  # doctest: +SKIP
            >>> pipe(image, decoding="ar").text  # doctest: +SKIP
            ['a small red circle sits ...']
        """
        # 1. check_inputs
        images, prompts = self.check_inputs(images, prompt, max_new_tokens, decoding, do_sample, temperature, top_k, top_p)
        if streamer is not None and len(images) != 1:
            raise ValueError(f"a streamer follows one caption; got {len(images)} images")
        generator = check_generator(generator, len(images))
        if isinstance(decoding, DecodingConfig):  # a window past the model's room for text, or branches past V, refused
            check_decoding_memory(decoding, TokenLayout.grid((self.max_new_tokens,), self.model.config.text_config.vocab_size),
                                  len(images), attention_heads(self.model.config), device=self.device)
        sampling = {k: v for k, v in dict(temperature=temperature, top_k=top_k, top_p=top_p).items() if v is not None}
        settings = dict(max_new_tokens=max_new_tokens, do_sample=do_sample, streamer=streamer, **sampling)
        callback = StepCallback(self, callback_on_step_end)
        # a list of generators: caption i takes the key of generator i, as alone
        tokens, stats = self.decode_batch(images, prompts, generator, lambda done, total: callback(done), decoding, **settings)
        # 5. detokenize
        text = [t.strip() for t in self.processor.tokenizer.batch_decode(tokens, skip_special_tokens=True)]
        stats = stats.per_sample()
        # 6. return
        if not return_dict:
            return text, stats
        return CaptioningPipelineOutput(text=text, tokens=tokens, stats=stats)

    def decode_batch(self, images: list[Image.Image], prompts: list[str], generator, on_step, decoding, max_new_tokens: int,
                     **settings):
        """One batch through `generate_text`: the new tokens `[B, N]` and the batch's `DecodeStats`."""
        from mmspec.pipelines.text import generate_text

        # 2. encode condition: image features enter in the prefill
        inputs = self.encode(images, prompts)
        positions = self.model.config.text_config.max_position_embeddings
        if inputs["input_ids"].shape[1] + max_new_tokens > positions:
            raise ValueError(f"the prompt takes {inputs['input_ids'].shape[1]} tokens (image included) and max_new_tokens is "
                             f"{max_new_tokens}: more than the model's {positions} positions; shorten one")
        tokenizer = self.processor.tokenizer
        # 3.-4. decode (cache, drafts and verification inside generate_text)
        ids, stats = generate_text(self.model, inputs["input_ids"], inputs["attention_mask"],
                                   decoding=self.resolve_decoding(decoding), return_stats=True, on_step=on_step,
                                   pixel_values=inputs["pixel_values"], generator=generator, max_new_tokens=max_new_tokens,
                                   eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **settings)
        return ids[:, inputs["input_ids"].shape[1]:], stats
