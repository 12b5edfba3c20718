"""LlamaGenPipeline: class- or text-conditional LlamaGen, decoded by any mmspec method.

Example:
    >>> from mmspec.pipelines.llamagen import LlamaGenPipeline
    >>> pipe = LlamaGenPipeline.from_pretrained("assets/default")  # doctest: +SKIP
    >>> out = pipe(class_labels=[0, 1], decoding="mc-sjd", generator=torch.Generator().manual_seed(0))  # doctest: +SKIP
    >>> out.images[0].save("0.png"), out.stats[0].forward_passes  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import save_file

from mmspec.decoding.config import DecodingConfig
from mmspec.models.llamagen import CaptionCondition, LlamaGenConfig, LlamaGenGPT
from mmspec.pipelines.pipeline_utils import (
    TokenImagePipeline,
    as_prompts,
    check_images_per_prompt,
    read_index,
    read_json,
    sampling_config,
    write_json,
)
from mmspec.tokenizers.llamagen_vq import LlamaGenVQ, VQConfig

T5_MAX_LENGTH = 120  # the original t2i caption length


def left_pad_captions(embeds: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Moves the valid caption tokens to the end and zeroes the padding, as LlamaGen's
    `sample_t2i.py` does (T5 pads on the right)."""
    valid = mask.sum(-1)
    rolled = torch.stack([torch.roll(e, -int(n), dims=0) for e, n in zip(embeds, valid)])
    new_mask = mask.flip(-1)
    return rolled * new_mask[..., None].to(rolled.dtype), new_mask


class LlamaGenPipeline(TokenImagePipeline):
    """LlamaGen GPT (`transformer`) + VQ tokenizer (`vqvae`), and for t2i a T5 encoder.

    Subclassing `DiffusionPipeline` gives `progress_bar`, `.to()`, `.device` and
    `set_progress_bar_config`; `save_pretrained`/`from_pretrained` are our own, because
    diffusers only saves `ModelMixin` components and our modules are plain `nn.Module`s that
    load original LlamaGen checkpoints (safetensors + JSON config per component, and a
    `model_index.json` naming the pipeline class).
    """

    model_cpu_offload_seq = "text_encoder->transformer->vqvae"
    _optional_components = ["text_encoder", "tokenizer"]

    def __init__(self, transformer: LlamaGenGPT, vqvae: LlamaGenVQ, text_encoder=None, tokenizer=None,
                 class_names: list[str] | None = None, default_sampling: dict | None = None):
        super().__init__()
        self.register_modules(transformer=transformer, vqvae=vqvae, text_encoder=text_encoder, tokenizer=tokenizer)
        self.class_names = class_names
        self.default_sampling = dict(default_sampling or {})

    # --- loading and saving --------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, **kwargs) -> "LlamaGenPipeline":
        """Loads a directory written by `save_pretrained` (the shipped model: "assets/default")."""
        root, index = read_index(pretrained_model_name_or_path, cls)
        gpt_config = LlamaGenConfig.from_dict(read_json(root / "transformer" / "config.json", "LlamaGen GPT"))
        vq_config = VQConfig.from_dict(read_json(root / "vqvae" / "config.json", "LlamaGen VQ"))
        transformer = LlamaGenGPT.from_checkpoint(root / "transformer" / "model.safetensors", gpt_config)
        vqvae = LlamaGenVQ.from_checkpoint(root / "vqvae" / "model.safetensors", vq_config)
        text_encoder = tokenizer = None
        if (root / "text_encoder").is_dir():
            from transformers import AutoTokenizer, T5EncoderModel

            text_encoder = T5EncoderModel.from_pretrained(root / "text_encoder").eval()
            tokenizer = AutoTokenizer.from_pretrained(root / "tokenizer")
        return cls(transformer, vqvae, text_encoder, tokenizer, index.get("class_names"), index.get("default_sampling"))

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

    def save_pretrained(self, save_directory: str | Path, **kwargs) -> None:
        root = Path(save_directory)
        for name, module in (("transformer", self.transformer), ("vqvae", self.vqvae)):
            write_json(root / name / "config.json", module.config.to_dict())
            state = {k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}
            save_file(state, str(root / name / "model.safetensors"))
        if self.text_encoder is not None:
            self.text_encoder.save_pretrained(root / "text_encoder")
            self.tokenizer.save_pretrained(root / "tokenizer")
        write_json(root / "model_index.json", {
            "_class_name": type(self).__name__,
            "transformer": ["mmspec.models.llamagen", "LlamaGenGPT"],
            "vqvae": ["mmspec.tokenizers.llamagen_vq", "LlamaGenVQ"],
            "class_names": self.class_names,
            "default_sampling": self.default_sampling,
        })

    # --- the call ----------------------------------------------------------------------

    def check_inputs(self, class_labels, prompt, num_images_per_prompt):
        c = self.transformer.config
        if c.model_type == "c2i":
            if prompt is not None:
                raise ValueError("this LlamaGen is class-conditional: pass class_labels, not prompt")
            if class_labels is None:
                raise ValueError("class_labels is required for a class-conditional LlamaGen")
            labels = torch.as_tensor(class_labels).reshape(-1)
            if labels.numel() == 0:
                raise ValueError("class_labels is empty")
            if labels.dtype.is_floating_point:
                raise ValueError(f"class_labels must be integers, got {labels.dtype}")
            bad = labels[(labels < 0) | (labels >= c.num_classes)]
            if bad.numel():
                raise ValueError(f"class label {int(bad[0])} is out of range [0, {c.num_classes})")
        else:
            if class_labels is not None:
                raise ValueError("this LlamaGen is text-conditional: pass prompt, not class_labels")
            as_prompts(prompt)
            if self.text_encoder is None:
                raise ValueError("this t2i pipeline has no text encoder; build it with from_original(..., t5=...)")
        check_images_per_prompt(num_images_per_prompt)

    def encode_condition(self, class_labels, prompt, num_images_per_prompt):
        device = self.transformer.output.weight.device
        if self.transformer.config.model_type == "c2i":
            labels = torch.as_tensor(class_labels).reshape(-1).long()
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
        decoding: str | DecodingConfig = "mc-sjd",
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
            class_labels (`int`, `list[int]` or `torch.Tensor`, *optional*): c2i classes.
            prompt (`str` or `list[str]`, *optional*): t2i prompts.
            decoding (`str` or `DecodingConfig`, *optional*, defaults to "mc-sjd"): any method
                of `mmspec.decoding` ("ar", "sjd", "mc-sjd+gsd", "zipar+mc-sjd", ...).
            guidance_scale (`float`, *optional*): CFG scale; defaults to the pipeline's default
                sampling (4.0 for original checkpoints).
            temperature, top_k, top_p (*optional*): sampling; default as `guidance_scale`.
            guidance_interval (`tuple[int, int]`, *optional*): positions where CFG applies.
            num_images_per_prompt (`int`, *optional*, defaults to 1): images per label / prompt.
            generator (`torch.Generator`, *optional*): the source of every random draw.
            output_type (`str`, *optional*, defaults to "pil"): "pil", "np", "pt" or "tokens".
            return_dict (`bool`, *optional*, defaults to True): an `ImagePipelineOutput`, else
                a tuple `(images, stats)`.
            callback_on_step_end (`Callable`, *optional*): `fn(pipe, step, tokens_committed, {})`
                after every forward.
        """
        # 1. check inputs
        sampling = sampling_config({"guidance_scale": 4.0, "top_k": 2000, **self.default_sampling}, guidance_scale=guidance_scale,
                                   temperature=temperature, top_k=top_k, top_p=top_p, guidance_interval=guidance_interval)
        decoding = self.check_common(sampling.guidance_scale, decoding, output_type, generator)
        self.check_inputs(class_labels, prompt, num_images_per_prompt)
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
