"""LuminaMGPTPipeline: text-to-image Lumina-mGPT (and Anole, the same Chameleon network with
Chameleon's plain image block), decoded by any mmspec method, as Lumina-mGPT generates:

* the prompt is Lumina-mGPT's single turn, `<s>Generate an image of {W}x{H} according to
  the following prompt:\\n{prompt}<reserved08706>` (`FlexARItemProcessor` and its
  `Conversation` template); Anole's is `<s>{prompt}<reserved08706>` (the end of turn), as
  LANTERN's `ChameleonForConditionalGeneration.generate` (`models/kv_variants/modeling_anole_kv.py`)
  and GAIR's `text2image.py` build it;
* the image block is start-of-image, the height and width grid tokens, rows of image tokens
  each closed by a new line, end-of-image: the layout forces all but the image tokens;
  Anole's is start-of-image and the image tokens alone (32 x 32 of them in the original);
* CFG as `LLMImageStartTriggeredUnbatchedClassifierFreeGuidanceLogitsProcessor` applies it:
  on logits, `u + s * (c - u)`, where the unconditional rows run the image block alone;
  Anole's unconditional rows run `<s>` and the image start (LANTERN's `generate`);
* top-k 2000 over the image tokens (the other tokens are masked first, as its
  `MultiModalLogitsProcessor` does before its `InterleavedTopKLogitsWarper`), CFG 4.0,
  temperature 1.0: the README's settings for Lumina-mGPT-7B-768; for Anole CFG 3.0, top-k
  2000, temperature 1.0 (LANTERN's `entrypoints/generate_images.py` defaults).

Images decode with Meta's VQGAN (`mmspec.tokenizers.chameleon_vqgan`).

Example:
    >>> from mmspec.pipelines.lumina_mgpt import LuminaMGPTPipeline
    >>> pipe = LuminaMGPTPipeline.from_transformers("Lumina-mGPT-7B-768", vqgan="ckpts/chameleon/tokenizer",  # doctest: +SKIP
    ...                                             dtype=torch.bfloat16).to("cuda")
    >>> out = pipe("a red panda in the snow", decoding="mc-sjd", generator=torch.Generator("cuda").manual_seed(0))  # doctest: +SKIP
    >>> out.images[0].save("panda.png"), out.stats[0].forward_passes  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from mmspec.core.bounds import images_within_budget
from mmspec.decoding.config import DecodingConfig
from mmspec.models.adapters.chameleon import STYLES, ChameleonCondition, ChameleonImageGenerator, load_chameleon
from mmspec.pipelines.base import TransformersImagePipeline
from mmspec.pipelines.checks import as_prompts, check_images_per_prompt, resolve_sampling, sampling_config
from mmspec.pipelines.components import self_saving, transformers_model, transformers_processor
from mmspec.pipelines.loading import pop_dtype
from mmspec.tokenizers.chameleon_vqgan import ChameleonVQGANDecoder

# Lumina-mGPT's README: `create_logits_processor(cfg=4.0, image_top_k=2000)`, temperature 1.0
DEFAULT_SAMPLING = dict(guidance_scale=4.0, top_k=2000)
# LANTERN's `entrypoints/generate_images.py` for Anole: --cfg 3.0 --top_k 2000 --temperature 1.0 --top_p 1.0
ANOLE_SAMPLING = dict(guidance_scale=3.0, top_k=2000)
STYLE_SAMPLING = {"lumina": DEFAULT_SAMPLING, "anole": ANOLE_SAMPLING}
TEMPLATE = "Generate an image of {width}x{height} according to the following prompt:\n{prompt}"
SEPARATOR = "<reserved08706>"  # the end of a turn: Lumina-mGPT's `Conversation`, Anole's prompt (8710)
PIXELS_PER_TOKEN = 16
DEFAULT_SIZE = {"lumina": 768, "anole": 512}


def find_vqgan(folder: Path) -> tuple[Path, Path] | None:
    """Meta's `vqgan.yaml` + `vqgan.ckpt` in `folder` or its `tokenizer/`, else None."""
    for base in (folder, folder / "tokenizer"):
        if (base / "vqgan.yaml").is_file() and (base / "vqgan.ckpt").is_file():
            return base / "vqgan.yaml", base / "vqgan.ckpt"
    return None


class LuminaMGPTPipeline(TransformersImagePipeline):
    """Lumina-mGPT or Anole (`model`, a `ChameleonForConditionalGeneration`), its tokenizer
    (`processor`) and Meta's VQGAN decoder (`vqgan`).

    Saved as `model/` and `processor/` (transformers' layout), `vqgan/` (config.json and
    safetensors) and a `model_index.json` holding the style and the default size.
    """

    declared_components = {
        # Lumina-mGPT's own folders need `load_chameleon` (per-shard query/key norms)
        "model": transformers_model("ChameleonForConditionalGeneration", load=load_chameleon),
        "processor": transformers_processor("AutoTokenizer"),
        "vqgan": self_saving(ChameleonVQGANDecoder),
    }
    family_sampling = DEFAULT_SAMPLING
    config_attributes = {"style": "style", "height": "height", "width": "width"}

    def __init__(self, model, processor, vqgan: ChameleonVQGANDecoder, style: str = "lumina",
                 height: int | None = None, width: int | None = None):
        """`style`: "lumina" or "anole"; `height` and `width` (pixels) set the default size
        (768 for Lumina-mGPT, 512 for Anole); they are saved with the pipeline."""
        super().__init__(model, processor)
        self.register_modules(vqgan=vqgan)
        if style not in STYLES:
            raise ValueError(f"unknown style {style!r}; choose from {', '.join(STYLES)}")
        self.style = style
        self.height = DEFAULT_SIZE[style] if height is None else height
        self.width = DEFAULT_SIZE[style] if width is None else width
        self.image_size()

    # --- loading and saving ------------------------------------------------------------

    @classmethod
    def from_transformers(cls, name_or_path: str | Path, vqgan: str | Path | None = None, **kwargs):
        """Builds the pipeline from a checkpoint folder in Lumina-mGPT's or Anole's Hugging
        Face layout (model and tokenizer) and Meta's VQGAN: `vqgan` is a folder holding
        `vqgan.yaml` and `vqgan.ckpt` (default: the checkpoint folder or its `tokenizer/`).
        `style`, `height` and `width` may be given; `torch_dtype` (or `dtype`) casts the model."""
        settings = {k: kwargs.pop(k) for k in cls.config_attributes if k in kwargs}
        dtype = pop_dtype(cls, kwargs)
        folder = Path(name_or_path)
        if not (folder / "config.json").is_file():
            raise ValueError(f"{str(folder)!r} is not a checkpoint folder (no config.json); download Lumina-mGPT or Anole first")
        found = find_vqgan(Path(vqgan) if vqgan is not None else folder)
        if found is None:
            where = vqgan if vqgan is not None else f"{folder} or {folder / 'tokenizer'}"
            raise ValueError(f"no Chameleon VQGAN (vqgan.yaml + vqgan.ckpt) in {where}; pass vqgan= the folder of Meta's "
                             "tokenizer files (Lumina-mGPT keeps them in ckpts/chameleon/tokenizer)")
        decoder = ChameleonVQGANDecoder.from_checkpoint(*found)
        model, processor = (cls.declared_components[name].load(folder, dtype) for name in ("model", "processor"))
        return cls(model, processor, decoder, **settings)

    # --- sizes ---------------------------------------------------------------------------

    def image_size(self, height: int | None = None, width: int | None = None) -> tuple[int, int]:
        """The image size in tokens `(rows, cols)` for `height x width` pixels (the
        pipeline's defaults when None), checked against the style and the model's positions."""
        height = self.height if height is None else height
        width = self.width if width is None else width
        unit = 2 * PIXELS_PER_TOKEN if self.style == "lumina" else PIXELS_PER_TOKEN
        for name, value in (("height", height), ("width", width)):
            if isinstance(value, bool) or not isinstance(value, int) or value < unit or value % unit:
                raise ValueError(f"{name} must be a positive multiple of {unit} pixels for {self.style}, got {value!r}")
        rows, cols = height // PIXELS_PER_TOKEN, width // PIXELS_PER_TOKEN
        length = rows * (cols + (self.style == "lumina")) + 4  # the image block, its prefix and end
        limit = self.model.config.max_position_embeddings
        if length > limit:
            raise ValueError(f"{height}x{width} pixels need {length} positions; this model has {limit}")
        return rows, cols

    def token_model(self, height: int | None = None, width: int | None = None) -> ChameleonImageGenerator:
        return ChameleonImageGenerator(self.model, *self.image_size(height, width), style=self.style)

    @property
    def token_grid(self) -> tuple[int, int]:
        """`(rows, width)` of the default size, Lumina's new-line column included."""
        generator = self.token_model()
        return generator.rows, generator.width

    @property
    def token_vocab_size(self) -> int:
        return self.model.lm_head.weight.shape[0]

    @property
    def default_sampling(self) -> dict:
        """The style's recipe: Lumina-mGPT's README (CFG 4.0) or LANTERN's Anole defaults (CFG 3.0)."""
        return resolve_sampling(STYLE_SAMPLING[self.style])

    def max_images_for(self, grid: tuple[int, int]) -> int:
        c = self.model.config
        return images_within_budget(c.num_hidden_layers, c.num_key_value_heads or c.num_attention_heads,
                                    c.hidden_size // c.num_attention_heads, grid[0] * grid[1], self.dtype)

    # --- the call ----------------------------------------------------------------------

    def prompt_ids(self, prompt: str, height: int, width: int) -> list[int]:
        """Token ids of one prompt in the style's format, without the image block."""
        tok = self.processor
        bos = tok.bos_token_id
        if bos is None:
            raise ValueError("the tokenizer has no BOS token (<s>); load Lumina-mGPT's or Anole's own tokenizer")
        sep = tok.convert_tokens_to_ids(SEPARATOR)
        if sep is None or sep == tok.unk_token_id:
            raise ValueError(f"the tokenizer has no {SEPARATOR} token: not Lumina-mGPT's or Anole's tokenizer")
        if self.style == "anole":  # LANTERN: `[0] + tokenize_text(prompt) + [8710, 8197]`, the image start added later
            return [bos, *tok.encode(prompt, add_special_tokens=False), sep]
        text = TEMPLATE.format(width=width, height=height, prompt=prompt)
        return [bos, *tok.encode(text, add_special_tokens=False), sep]

    def encode_condition(self, prompts: list[str], num_images_per_prompt: int, height: int, width: int) -> ChameleonCondition:
        """The prompts' ids, left-padded, one row per image."""
        rows = [self.prompt_ids(p, height, width) for p in prompts]
        P = max(map(len, rows))
        pad = self.model.config.pad_token_id or 0
        ids = torch.full((len(rows), P), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, row in enumerate(rows):
            ids[i, P - len(row):], mask[i, P - len(row):] = torch.tensor(row), 1
        device = self.model.lm_head.weight.device
        return ChameleonCondition(*(x.repeat_interleave(num_images_per_prompt, 0).to(device) for x in (ids, mask)))

    def decode_images(self, token_model: ChameleonImageGenerator, tokens: torch.Tensor) -> torch.Tensor:
        """Layout tokens -> images `[B, 3, H, W]` in [-1, 1]."""
        codes = token_model.image_tokens(tokens)
        if int(codes.max()) >= self.vqgan.config.n_embed:
            raise ValueError(f"the model writes codes up to {int(codes.max())}; this VQGAN has {self.vqgan.config.n_embed}")
        return self.vqgan.decode(codes).float().clamp(-1, 1)

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
        height: int | None = None,
        width: int | None = None,
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
                of `mmspec.decoding` ("ar", "sjd", "mc-sjd", "mc-sjd+lantern", ...).
            guidance_scale (`float`, *optional*, defaults to 4.0, Anole 3.0): CFG scale (1
                disables it); the unconditional rows run the image block alone, as
                Lumina-mGPT's do (Anole's: `<s>` and the image start, as LANTERN's).
            temperature, top_k, top_p (*optional*): sampling; default 1.0, 2000, 1.0.
            guidance_interval (`tuple[int, int]`, *optional*): positions where CFG applies.
            height, width (`int`, *optional*): pixels, multiples of 32 (Lumina) or 16 (Anole);
                default the pipeline's (768 / 512).
            num_images_per_prompt (`int`, *optional*, defaults to 1): images per prompt.
            generator (`torch.Generator` or `list[torch.Generator]`, *optional*): the source of
                every random draw; a list gives one per image.
            output_type (`str`, *optional*, defaults to "pil"): "pil", "np", "pt" or "tokens"
                (the layout tokens, new lines included).
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
        height = self.height if height is None else height
        width = self.width if width is None else width
        token_model = self.token_model(height, width)
        decoding, generator = self.check_common(decoding, output_type, generator, len(prompts) * num_images_per_prompt,
                                                (token_model.rows, token_model.width))
        # 2. encode the condition
        condition = self.encode_condition(prompts, num_images_per_prompt, height, width)
        limit = self.model.config.max_position_embeddings
        if condition.input_ids.shape[1] + len(token_model.prefix) + token_model.layout_length + 1 > limit:
            raise ValueError(f"the prompt and a {height}x{width} image exceed the model's {limit} positions; shorten the prompt")
        # 3. the layout: image tokens, forced new lines, the VQGAN codebook
        layout = token_model.layout()
        # 4. decode
        tokens, stats = self.decode_tokens(token_model, condition, layout, decoding, sampling, generator, callback_on_step_end)
        # 5. detokenize
        images = None if output_type == "tokens" else self.decode_images(token_model, tokens)
        # 6. return
        return self.to_output(images, tokens, stats, output_type, return_dict)
