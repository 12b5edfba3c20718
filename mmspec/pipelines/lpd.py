"""LPDPipeline: a class-conditional LPD model decoded group by group in LPD's locality-aware order
(`mmspec.generate` with "lpd-20", "lpd-32" or "ar", as every pipeline decodes).

Example:
    >>> from mmspec.assets import LPD_ASSETS
    >>> from mmspec.pipelines import load_pipeline
    >>> pipe = load_pipeline(LPD_ASSETS)  # doctest: +SKIP
    >>> out = pipe(class_labels=[0, 1], num_inference_steps=20, generator=torch.Generator().manual_seed(0))  # doctest: +SKIP
    >>> out.images[0].save("0.png"), out.stats[0].forward_passes  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch

from mmspec.core.bounds import images_within_budget
from mmspec.decoding.config import DecodingConfig, LPDDecoding, as_lpd_decoding
from mmspec.decoding.lpd import check_guidance_schedule
from mmspec.decoding.orders import LocalityOrder
from mmspec.metrics.classifier import ShapesClassifier
from mmspec.models.networks.lpd import LPD, LPDConfig
from mmspec.pipelines.llamagen import SHAPES_CLASSIFIER, VQVAE, as_class_labels
from mmspec.pipelines.base import TokenImagePipeline
from mmspec.pipelines.checks import check_images_per_prompt, class_name_list, sampling_config
from mmspec.pipelines.components import own_module
from mmspec.tokenizers.llamagen_vq import LlamaGenVQ

# LPD's evaluation scripts: linear CFG schedule, temperature 1
FAMILY_SAMPLING = dict(guidance_scale=4.0)


class LPDPipeline(TokenImagePipeline):
    """LPD decoder (`transformer`) + VQ tokenizer (`vqvae`), and optionally the classifier
    that judges the Shapes models. Saved and loaded as `LlamaGenPipeline` is
    (`mmspec.pipelines.load_pipeline`).

    Args:
        class_names (`list[str]`, *optional*): one name per class.
        default_sampling (`dict`, *optional*): sampling defaults saved with the model.
        repulsion (`int`, *optional*, defaults to 1): the order's repulsion distance by default.
        guidance_schedule (`str`, *optional*, defaults to "linear"): how guidance grows along
            the order by default: LPD's "linear", or "constant".
        metadata (`dict`, *optional*): other `model_index.json` entries, kept on saving.
    """

    model_cpu_offload_seq = "transformer->vqvae"
    _optional_components = ["classifier"]
    declared_components = {"transformer": own_module(LPD, LPDConfig, "LPD model"), "vqvae": VQVAE, "classifier": SHAPES_CLASSIFIER}
    config_attributes = {"class_names": "_class_names", "default_sampling": "_saved_sampling", "repulsion": "repulsion",
                         "guidance_schedule": "guidance_schedule"}
    keeps_metadata = True
    cast_after_loading = True
    family_sampling = FAMILY_SAMPLING
    condition_kind = "class"
    default_decoding = "lpd-20"

    def __init__(self, transformer: LPD, vqvae: LlamaGenVQ, classifier: ShapesClassifier | None = None,
                 class_names: list[str] | None = None, default_sampling: dict | None = None, repulsion: int = 1,
                 metadata: dict | None = None, guidance_schedule: str = "linear"):
        super().__init__()
        self.register_modules(transformer=transformer, vqvae=vqvae, classifier=classifier)
        self._class_names = class_name_list(class_names, transformer.config.class_num)
        self.keep_default_sampling(default_sampling)
        self.repulsion = repulsion
        self.guidance_schedule = check_guidance_schedule(guidance_schedule)
        self.metadata = dict(metadata or {})

    @property
    def class_names(self) -> list[str]:
        return list(self._class_names or map(str, range(self.transformer.config.class_num)))

    @property
    def token_grid(self) -> tuple[int, int]:
        g = self.transformer.config.grid_size
        return g, g

    def max_images_for(self, grid: tuple[int, int]) -> int:
        c = self.transformer.config
        heads = c.decoder_num_heads
        return images_within_budget(c.decoder_depth, heads, c.decoder_embed_dim // heads, grid[0] * grid[1] + 1, self.transformer.dtype)

    def order(self, num_inference_steps: int | None, repulsion: int | None = None) -> LocalityOrder:
        """The locality-aware order with LPD's group sizes for `num_inference_steps` (None:
        one cell per step)."""
        g = self.transformer.config.grid_size
        return LocalityOrder.for_steps(num_inference_steps or g * g, g, repulsion=self.repulsion if repulsion is None else repulsion)

    def check_decoding(self, decoding: str | DecodingConfig | LPDDecoding) -> LPDDecoding:
        """`decoding` as an `LPDDecoding`: "lpd-20", "lpd-32", "ar" (or the engine's AR config);
        refused in one line when this model has no group-size table for it."""
        decoding = as_lpd_decoding(decoding)
        self.order(decoding.steps, decoding.repulsion)
        return decoding

    # --- the call ----------------------------------------------------------------------

    @torch.no_grad()
    def __call__(
        self,
        class_labels: int | list[int] | torch.Tensor,
        num_inference_steps: int | None = None,
        decoding: str | LPDDecoding | DecodingConfig = "lpd-20",
        guidance_scale: float | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        guidance_schedule: str | None = None,
        repulsion: int | None = None,
        num_images_per_prompt: int = 1,
        generator: torch.Generator | list[torch.Generator] | None = None,
        output_type: str = "pil",
        return_dict: bool = True,
        callback_on_step_end: Callable | None = None,
    ):
        """Generates images in `num_inference_steps` forwards each.

        Args:
            class_labels (`int`, `str`, a list of them or `torch.Tensor`): classes, by label or name.
            num_inference_steps (`int`, *optional*): forwards per image, a step count with a
                group-size table (20 or 32 on a 16x16 grid); overrides `decoding`'s.
            decoding (`str` or `LPDDecoding`, *optional*, defaults to "lpd-20"): "lpd-20",
                "lpd-32" or "ar" (one cell per forward), as the CLI and benchmarks name them;
                decoded by `mmspec.generate` (LPD's group-by-group path).
            guidance_scale (`float`, *optional*): the final CFG scale of the schedule.
            temperature, top_k, top_p (*optional*): sampling; default to the saved sampling.
            guidance_schedule (`str`, *optional*): the pipeline's by default; LPD's linear growth
                of guidance along the order, or "constant".
            repulsion (`int`, *optional*): the order's repulsion distance (the pipeline's by default).
            num_images_per_prompt (`int`, *optional*, defaults to 1): images per label.
            generator (`torch.Generator` or `list[torch.Generator]`, *optional*): every random
                draw, orders included; a list gives one per image.
            output_type (`str`, *optional*, defaults to "pil"): "pil", "np", "pt" or "tokens".
            return_dict (`bool`, *optional*, defaults to True): an `ImagePipelineOutput`, else
                a tuple `(images, stats)`.
            callback_on_step_end (`Callable`, *optional*): `fn(pipe, step, tokens_committed, {})`
                after every forward, one per group (`step` counts the call's forwards from 0,
                `tokens_committed` the cells done per image of the run).
        """
        # 1. check inputs
        sampling = sampling_config(self._default_sampling, guidance_scale=guidance_scale, temperature=temperature,
                                   top_k=top_k, top_p=top_p)
        check_images_per_prompt(num_images_per_prompt)
        labels = as_class_labels(class_labels, self.transformer.config.class_num, self.class_names).repeat_interleave(num_images_per_prompt)
        decoding = self.check_decoding(decoding)
        if num_inference_steps is not None:
            if isinstance(num_inference_steps, bool) or not isinstance(num_inference_steps, int) or num_inference_steps < 1:
                raise ValueError(f"num_inference_steps must be a whole number >= 1 with a group-size table (20 or 32 on a "
                                 f"16x16 grid), got {num_inference_steps!r}")
            decoding = LPDDecoding(num_inference_steps, decoding.repulsion)
        repulsion = self.order(decoding.steps, decoding.repulsion if repulsion is None else repulsion).repulsion
        decoding = replace(decoding, repulsion=repulsion)
        guidance_schedule = check_guidance_schedule(guidance_schedule or self.guidance_schedule)
        generator = self.check_batch(output_type, generator, len(labels), self.token_grid)
        # 2. decode, group by group (one forward per group: the bar and the callback advance after each)
        tokens, stats = self.decode_tokens(self.transformer, labels, None, decoding, sampling, generator, callback_on_step_end,
                                           guidance_schedule=guidance_schedule)
        # 3. detokenize and return
        images = None if output_type == "tokens" else self.vqvae.decode(tokens)
        return self.to_output(images, tokens, stats, output_type, return_dict)
