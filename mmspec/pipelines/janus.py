"""JanusPipeline: text-to-image Janus / Janus-Pro (transformers' `JanusForConditionalGeneration`
image mode), decoded by any mmspec method.

Example:
    >>> from mmspec.pipelines.janus import JanusPipeline
    >>> pipe = JanusPipeline.from_transformers("deepseek-community/Janus-Pro-7B", dtype=torch.bfloat16).to("cuda")  # doctest: +SKIP
    >>> out = pipe("a red panda in the snow", decoding="mc-sjd", generator=torch.Generator("cuda").manual_seed(0))  # doctest: +SKIP
    >>> out.images[0].save("panda.png"), out.stats[0].forward_passes  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mmspec.decoding.config import DecodingConfig
from mmspec.models.adapters.janus import JanusCondition, JanusImageGenerator
from mmspec.pipelines.base import TransformersImagePipeline, to_signed_pixels
from mmspec.pipelines.checks import as_prompts, check_images_per_prompt, sampling_config
from mmspec.pipelines.components import transformers_model, transformers_processor

# Janus-Pro's `generation_inference.py`: cfg_weight 5, temperature 1, no top-k
DEFAULT_SAMPLING = dict(guidance_scale=5.0)


class JanusPipeline(TransformersImagePipeline):
    """Janus-Pro (`model`, a `JanusForConditionalGeneration` with its VQ) and its `JanusProcessor`.

    Saved as transformers saves each component (`model/`, `processor/`) plus a
    `model_index.json` naming the pipeline class.
    """

    declared_components = {
        "model": transformers_model("JanusForConditionalGeneration"),
        "processor": transformers_processor("JanusProcessor"),
    }
    family_sampling = DEFAULT_SAMPLING

    @property
    def token_grid(self) -> tuple[int, int]:
        """`(S, S)`: the VQ's code grid."""
        return JanusImageGenerator(self.model).grid

    # --- the call ----------------------------------------------------------------------

    def encode_condition(self, prompts: list[str], num_images_per_prompt: int) -> JanusCondition:
        """Tokenizes the prompts as Janus' image mode does (the chat template, when the
        processor has one, then the begin-of-image token); one row per image."""
        if self.processor.chat_template is not None:
            prompts = [
                self.processor.apply_chat_template([{"role": "user", "content": [{"type": "text", "text": p}]}],
                                                   add_generation_prompt=True)
                for p in prompts
            ]
        enc = self.processor(text=prompts, generation_mode="image", padding=True, padding_side="left", return_tensors="pt")
        device = self.model.lm_head.weight.device
        return JanusCondition(*(x.repeat_interleave(num_images_per_prompt, 0).to(device) for x in (enc.input_ids, enc.attention_mask)))

    def decode_images(self, tokens: torch.Tensor) -> torch.Tensor:
        """Codes `[B, S * S]` -> images `[B, 3, H, W]` in [-1, 1]."""
        pixels = self.model.decode_image_tokens(tokens).permute(0, 3, 1, 2)  # [B, H, W, 3] -> [B, 3, H, W]
        return to_signed_pixels(pixels, self.processor.image_processor)

    @torch.no_grad()
    def __call__(
        self,
        prompt: str | list[str],
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
        """Generates images from prompts.

        Args:
            prompt (`str` or `list[str]`): the prompts.
            decoding (`str` or `DecodingConfig`, *optional*, defaults to "auto"): any method
                of `mmspec.decoding` ("ar", "sjd", "mc-sjd+gsd", "zipar+mc-sjd", ...).
            guidance_scale (`float`, *optional*, defaults to 5.0): CFG scale (1 disables it); the
                CFG rows are the prompt with all but BOS and begin-of-image padded, as in Janus.
            temperature, top_k, top_p (*optional*): sampling; default 1.0, all tokens, 1.0.
            guidance_interval (`tuple[int, int]`, *optional*): positions where CFG applies.
            num_images_per_prompt (`int`, *optional*, defaults to 1): images per prompt.
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
        sampling = sampling_config(self.default_sampling, guidance_scale=guidance_scale, temperature=temperature,
                                   top_k=top_k, top_p=top_p, guidance_interval=guidance_interval)
        prompts = as_prompts(prompt)
        check_images_per_prompt(num_images_per_prompt)
        token_model = JanusImageGenerator(self.model)
        decoding, generator = self.check_common(decoding, output_type, generator, len(prompts) * num_images_per_prompt,
                                                token_model.grid)
        # 2. encode the condition
        condition = self.encode_condition(prompts, num_images_per_prompt)
        # 3. the layout: the S x S code grid with the codebook
        layout = token_model.layout()
        # 4. decode
        tokens, stats = self.decode_tokens(token_model, condition, layout, decoding, sampling, generator, callback_on_step_end)
        # 5. detokenize
        images = None if output_type == "tokens" else self.decode_images(tokens)
        # 6. return
        return self.to_output(images, tokens, stats, output_type, return_dict)
