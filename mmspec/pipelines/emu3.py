"""Emu3Pipeline: text-to-image Emu3 (transformers' `Emu3ForConditionalGeneration`), decoded
by any mmspec method.

Example:
    >>> from mmspec.pipelines.emu3 import Emu3Pipeline
    >>> pipe = Emu3Pipeline.from_transformers("BAAI/Emu3-Gen-hf", dtype=torch.bfloat16).to("cuda")  # doctest: +SKIP
    >>> out = pipe("a portrait of a cat. masterpiece, film grained, best quality.", decoding="mc-sjd",  # doctest: +SKIP
    ...            generator=torch.Generator("cuda").manual_seed(0))
    >>> out.images[0].save("cat.png"), out.stats[0].forward_passes  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mmspec.decoding.config import DecodingConfig
from mmspec.models.adapters.emu3 import Emu3Condition, Emu3ImageGenerator
from mmspec.pipelines.base import TransformersImagePipeline, to_signed_pixels
from mmspec.pipelines.checks import as_prompts, check_images_per_prompt, sampling_config
from mmspec.pipelines.components import transformers_model, transformers_processor

# Emu3's recipe (BAAI/Emu3 `image_generation.py`): CFG 3 against this negative prompt, top-k 2048
NEGATIVE_PROMPT = (
    "lowres, bad anatomy, bad hands, text, error, missing fingers, extra digit, fewer digits, cropped, worst quality, "
    "low quality, normal quality, jpeg artifacts, signature, watermark, username, blurry."
)
DEFAULT_SAMPLING = dict(guidance_scale=3.0, top_k=2048)


class Emu3Pipeline(TransformersImagePipeline):
    """Emu3-Gen (`model`, an `Emu3ForConditionalGeneration` with its VQ) and its `Emu3Processor`.

    Saved as transformers saves each component (`model/`, `processor/`) plus a
    `model_index.json` naming the pipeline class.
    """

    declared_components = {
        "model": transformers_model("Emu3ForConditionalGeneration"),
        "processor": transformers_processor("Emu3Processor"),
    }
    family_sampling = DEFAULT_SAMPLING
    config_attributes = {"ratio": "ratio", "image_area": "image_area"}

    def __init__(self, model, processor, ratio: str | None = None, image_area: int | None = None):
        """`ratio` and `image_area` set the default size (else the processor's, "1:1" at
        720 x 720); they are saved with the pipeline."""
        super().__init__(model, processor)
        self.ratio, self.image_area = ratio, image_area
        self.image_size()

    def image_size(self, ratio: str | None = None, image_area: int | None = None) -> tuple[int, int]:
        """The image size in tokens `(height, width)` for an aspect `ratio` "w:h" and a pixel
        `image_area` (the pipeline's defaults when None), checked to fit the model's positions."""
        ratio = next(v for v in (ratio, self.ratio, self.processor.ratio) if v is not None)
        image_area = next(v for v in (image_area, self.image_area, self.processor.image_area) if v is not None)
        w, _, h = ratio.partition(":") if isinstance(ratio, str) else ("", "", "")
        if not (w.isdigit() and h.isdigit() and int(w) > 0 and int(h) > 0):
            raise ValueError(f"ratio must be 'w:h' with positive integers, such as '16:9', got {ratio!r}")
        if isinstance(image_area, bool) or not isinstance(image_area, int) or image_area < 1:
            raise ValueError(f"image_area must be a positive integer (pixels), got {image_area!r}")
        height, width = self.processor.calculate_generate_size(ratio, image_area, self.processor.downsample_ratio)
        limit = self.model.config.text_config.max_position_embeddings
        if height < 1 or width < 1 or height * (width + 1) > limit:
            raise ValueError(f"ratio {ratio} at image_area {image_area} gives {height}x{width} tokens; this model takes 1 to {limit} positions")
        return height, width

    @property
    def token_grid(self) -> tuple[int, int]:
        """`(height, width + 1)`: the default size in tokens, the end-of-line column included."""
        height, width = self.image_size()
        return height, width + 1

    # --- the call ----------------------------------------------------------------------

    def encode_condition(self, prompts: list[str], negative_prompts: list[str] | None, num_images_per_prompt: int,
                         height: int, width: int) -> Emu3Condition:
        """Tokenizes the prompts (and negatives) with the image-generation prefix of a
        `height x width`-token image; one row per image."""
        # the processor derives the size from a ratio and an area: ask for exactly this one
        size = dict(ratio=f"{width}:{height}", image_area=height * width * self.processor.downsample_ratio ** 2)
        kw = dict(return_for_image_generation=True, padding=True, padding_side="left", return_tensors="pt", **size)
        enc = self.processor(text=prompts, **kw)
        assert tuple(enc["image_sizes"][0]) == (height, width), enc["image_sizes"][0]
        device = self.model.lm_head.weight.device

        def rows(x):
            return x.repeat_interleave(num_images_per_prompt, 0).to(device)

        condition = Emu3Condition(rows(enc.input_ids), rows(enc.attention_mask))
        if negative_prompts is not None:
            neg = self.processor(text=negative_prompts, **kw)
            condition.negative_input_ids, condition.negative_attention_mask = rows(neg.input_ids), rows(neg.attention_mask)
        return condition

    def decode_images(self, tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Grid tokens `[B, height * (width + 1)]` -> images `[B, 3, H, W]` in [-1, 1]."""
        tok = self.processor.tokenizer
        tail = torch.tensor([tok.eof_token_id, tok.eoi_token_id, tok.eos_token_id], device=tokens.device)
        sequence = torch.cat([tokens, tail.expand(len(tokens), 3)], 1)  # the fixed end of an Emu3 image
        pixels = self.model.decode_image_tokens(image_tokens=sequence, height=height, width=width)
        return to_signed_pixels(pixels, self.processor.image_processor)

    @torch.no_grad()
    def __call__(
        self,
        prompt: str | list[str],
        negative_prompt: str | list[str] | None = None,
        decoding: str | DecodingConfig = "auto",
        guidance_scale: float | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        guidance_interval: tuple[int, int] | None = None,
        ratio: str | None = None,
        image_area: int | None = None,
        num_images_per_prompt: int = 1,
        generator: torch.Generator | None = None,
        output_type: str = "pil",
        return_dict: bool = True,
        callback_on_step_end: Callable | None = None,
    ):
        """Generates images from prompts.

        Args:
            prompt (`str` or `list[str]`): the prompts, as given (Emu3's own recipe ends
                them with " masterpiece, film grained, best quality.": add it yourself).
            negative_prompt (`str` or `list[str]`, *optional*): what the CFG rows run, one or one
                per prompt; defaults to Emu3's `NEGATIVE_PROMPT`. Unused when guidance_scale is 1.
            decoding (`str` or `DecodingConfig`, *optional*, defaults to "auto"): any method
                of `mmspec.decoding` ("ar", "sjd", "mc-sjd+gsd", "zipar+mc-sjd", ...).
            guidance_scale (`float`, *optional*, defaults to 3.0): CFG scale (1 disables it).
            temperature, top_k, top_p (*optional*): sampling; default 1.0, 2048, 1.0 (Emu3's recipe).
            guidance_interval (`tuple[int, int]`, *optional*): positions where CFG applies.
            ratio (`str`, *optional*): aspect ratio "w:h"; defaults to the pipeline's `ratio`.
            image_area (`int`, *optional*): pixel area; defaults to the pipeline's `image_area`.
            num_images_per_prompt (`int`, *optional*, defaults to 1): images per prompt.
            generator (`torch.Generator` or `list[torch.Generator]`, *optional*): the source of
                every random draw; a list gives one per image (image i depends on it alone,
                images are then decoded one by one).
            output_type (`str`, *optional*, defaults to "pil"): "pil", "np", "pt" or "tokens"
                (the `[B, H * (W + 1)]` grid tokens, end-of-line tokens included).
            return_dict (`bool`, *optional*, defaults to True): an `ImagePipelineOutput`, else
                a tuple `(images, stats)`.
            callback_on_step_end (`Callable`, *optional*): `fn(pipe, step, tokens_committed, {})`
                after every forward.
        """
        # 1. check inputs
        sampling = sampling_config(self.default_sampling, guidance_scale=guidance_scale, temperature=temperature,
                                   top_k=top_k, top_p=top_p, guidance_interval=guidance_interval)
        prompts = as_prompts(prompt)
        negatives = None
        if sampling.guided:
            negatives = as_prompts(NEGATIVE_PROMPT if negative_prompt is None else negative_prompt, "negative_prompt")
            if len(negatives) == 1:
                negatives = negatives * len(prompts)
            if len(negatives) != len(prompts):
                raise ValueError(f"negative_prompt has {len(negatives)} entries for {len(prompts)} prompts; give one or one per prompt")
        check_images_per_prompt(num_images_per_prompt)
        height, width = self.image_size(ratio, image_area)
        decoding, generator = self.check_common(decoding, output_type, generator, len(prompts) * num_images_per_prompt,
                                                (height, width + 1))
        # 2. encode the condition
        condition = self.encode_condition(prompts, negatives, num_images_per_prompt, height, width)
        # 3. the layout: visual tokens, forced end-of-line column, codebook
        token_model = Emu3ImageGenerator(self.model, height, width)
        layout = token_model.layout()
        # 4. decode
        tokens, stats = self.decode_tokens(token_model, condition, layout, decoding, sampling, generator, callback_on_step_end)
        # 5. detokenize
        images = None if output_type == "tokens" else self.decode_images(tokens, height, width)
        # 6. return
        return self.to_output(images, tokens, stats, output_type, return_dict)
