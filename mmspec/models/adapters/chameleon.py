"""The Chameleon family (Lumina-mGPT, Anole) generating images as a TokenModel, over
transformers' `ChameleonForConditionalGeneration`.

The network is Chameleon's as transformers implements it; two points of the forward are
taken from Lumina-mGPT's own copy of that code (`lumina_mgpt/model/chameleon/`), because
transformers' forward would make image generation impossible:

* the logits are upcast to float32 before anything else (transformers keeps the model dtype);
* image-token logits are set to `finfo(float32).min` only when `config.mask_image_logits`
  is set (transformers always does; Lumina's released configs set it false, and Anole's
  conversions carry no such key, so it defaults to false here).

So tokens are embedded by `embed_tokens`, run through the decoder layers with our cache
and mask (`hf_session.py`) and scored by `lm_head` directly, never by the model's forward.

The checkpoints differ in one tensor shape: Lumina-mGPT's code (transformers 4.43's) keeps
the per-head query/key LayerNorms as one `[model_parallel_size, head_dim]` row per shard,
repeated over the shard's heads at run time; transformers 5 stores `[heads, head_dim]`.
`load_chameleon` repeats the rows once at load (`expand_qk_norms`), which computes the same.

An image is a block of the sequence that starts with the start-of-image token:

* Lumina-mGPT (`style="lumina"`): start-of-image, the height and width in 32-pixel grids as
  the tokens `<reserved{8800 + n:05d}>`, then `rows` rows of `cols` image tokens, each
  closed by the new-line token `<reserved08799>`, then end-of-image (`FlexARItemProcessor`);
* Anole (`style="anole"`): start-of-image, then `rows * cols` image tokens in raster order,
  no grid tokens and no new lines (LANTERN's `modeling_anole_kv.py` generates 1024 = 32 x 32
  of them and writes no end-of-image; Meta's and GAIR's Chameleon code appends it).

The start-of-image and grid tokens end the prompt (the layout fixes them, so they are the
condition, not drafts); the layout is the grid of what follows, new lines forced in its
last column; the pipeline appends the end-of-image token. Under CFG the unconditional rows
run, with their own cache (here: their own rows):

* Lumina-mGPT: what its `LLMImageStartTriggeredUnbatchedClassifierFreeGuidanceLogitsProcessor`
  runs, the sequence from the image start on;
* Anole: `<s>` then the image start, at positions 0 and 1 (LANTERN's
  `ChameleonForConditionalGeneration.generate`; Meta's `ImageDecoder` in GAIR's Anole code
  uses the same unconditional row).

Example:
    >>> from transformers import ChameleonForConditionalGeneration  # doctest: +SKIP
    >>> model = ChameleonForConditionalGeneration.from_pretrained("Alpha-VLLM/Lumina-mGPT-7B-768")  # doctest: +SKIP
    >>> generator = ChameleonImageGenerator(model, rows=48, cols=48)  # doctest: +SKIP
    >>> session = generator.start(ChameleonCondition(prompt_ids), guided=True)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from mmspec.core.layout import TokenLayout
from mmspec.models.adapters.emu3 import left_pad
from mmspec.models.cache.hf_session import DecoderSession

logger = logging.getLogger(__name__)

STYLES = ("lumina", "anole")
BOS, IMAGE_START, IMAGE_END = "<s>", "<racm3:break>", "<eoss>"
NEW_LINE = "<reserved08799>"
GRID_PIXELS = 32  # Lumina-mGPT's grid unit: one grid is 2 x 2 image tokens of the 16x-downsampling VQGAN


def grid_token_name(n_grids: int) -> str:
    """Lumina-mGPT's name of the token for a side of `n_grids` 32-pixel grids."""
    return f"<reserved{8800 + n_grids:05d}>"


def expand_qk_norms(state_dict: dict, config) -> dict:
    """A state dict with Lumina-mGPT's (transformers 4.43's) `[model_parallel_size, head_dim]`
    query/key LayerNorm parameters repeated to transformers 5's `[heads, head_dim]`: shard
    s's row serves heads `s * heads_per_shard ...`, as the original's `repeat_interleave`."""
    out = dict(state_dict)
    for key, value in state_dict.items():
        for norm, heads in (("q_norm", config.num_attention_heads), ("k_norm", config.num_key_value_heads)):
            if f".self_attn.{norm}." in key and value.dim() == 2 and value.shape[0] != heads:
                if heads % value.shape[0]:
                    raise ValueError(f"{key} has {value.shape[0]} rows, which do not divide {heads} heads")
                out[key] = value.repeat_interleave(heads // value.shape[0], dim=0)
    return out


def load_chameleon(path, *, dtype: torch.dtype | None = None, device=None, attn_implementation: str = "sdpa"):
    """`ChameleonForConditionalGeneration` from a folder in Lumina-mGPT's layout (saved by its
    transformers 4.43 code: per-shard query/key norms) or transformers 5's, in eval mode.

    Args:
        path (`str` or `Path`): a folder with `config.json` and safetensors weights.
        dtype (`torch.dtype`, *optional*): the weights' dtype (default: the checkpoint's).
        device (*optional*): where the model goes.
        attn_implementation (`str`, *optional*, defaults to `"sdpa"`): `"sdpa"` or `"eager"`.

    Example:
        >>> model = load_chameleon("Lumina-mGPT-7B-768", dtype=torch.bfloat16, device="cuda")  # doctest: +SKIP
    """
    from safetensors import safe_open
    from transformers import ChameleonForConditionalGeneration

    path = Path(path)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{str(path)!r} has no config.json: not a Chameleon / Lumina-mGPT / Anole checkpoint folder")
    model_type = json.loads(config_file.read_text()).get("model_type")
    if model_type != "chameleon":
        raise ValueError(f"{str(path)!r} holds a {model_type!r} model, not a Chameleon one (Lumina-mGPT, Anole)")
    model, info = ChameleonForConditionalGeneration.from_pretrained(
        path, dtype=dtype, attn_implementation=attn_implementation, ignore_mismatched_sizes=True, output_loading_info=True,
    )
    mismatched = [m[0] if isinstance(m, (tuple, list)) else m for m in info.get("mismatched_keys", [])]
    others = [k for k in mismatched if not any(f".self_attn.{n}." in k for n in ("q_norm", "k_norm"))]
    if others:
        raise ValueError(f"checkpoint tensors do not fit the config: {', '.join(others[:3])}")
    if mismatched:  # re-read just those tensors and repeat their shard rows over the heads
        wanted, found = set(mismatched), {}
        for file in sorted(path.glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as f:
                found.update({k: f.get_tensor(k) for k in f.keys() if k in wanted})
        if set(found) != wanted:
            raise ValueError(f"could not re-read {', '.join(sorted(wanted - set(found))[:3])} from {str(path)!r}")
        expanded = expand_qk_norms(found, model.config)
        params = dict(model.named_parameters())
        with torch.no_grad():
            for key, value in expanded.items():
                if params[key].shape != value.shape:
                    raise ValueError(f"{key}: checkpoint {tuple(value.shape)}, model {tuple(params[key].shape)}")
                params[key].copy_(value)
        logger.info("repeated %d per-shard query/key norms over their heads", len(expanded))
    model = model.eval()
    return model if device is None else model.to(device)


@dataclass
class ChameleonCondition:
    """Tokenized prompts `input_ids [B, P]` (BOS and the prompt text in the model's
    template; padding on the left, `attention_mask [B, P]` 1 at real tokens). The image
    prefix (start-of-image and grid tokens) is appended by the generator."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None = None


class ChameleonImageGenerator:
    """`ChameleonForConditionalGeneration` generating one `rows x cols`-token image per prompt.

    Args:
        model (`ChameleonForConditionalGeneration`): the transformers model (in eval mode).
        rows, cols (`int`): the image size in tokens (16 pixels each); Lumina-mGPT needs both even.
        style (`str`, *optional*, defaults to `"lumina"`): the image block, `"lumina"` (grid
            tokens and new lines) or `"anole"` (Chameleon's plain block).
    """

    def __init__(self, model, rows: int, cols: int, style: str = "lumina"):
        if style not in STYLES:
            raise ValueError(f"unknown style {style!r}; choose from {', '.join(STYLES)}")
        if rows < 1 or cols < 1:
            raise ValueError(f"image size in tokens must be positive, got {rows}x{cols}")
        if style == "lumina" and (rows % 2 or cols % 2):
            raise ValueError(f"Lumina-mGPT images are whole 32-pixel grids: rows and cols must be even, got {rows}x{cols}")
        self.model, self.rows, self.cols, self.style = model, rows, cols, style
        self.decoder = model.model
        vocab = model.config.vocabulary_map or {}
        mapping = model.model.vocabulary_mapping
        self.image_ids = torch.tensor(mapping.image_tokens, dtype=torch.long)
        names = [IMAGE_START, IMAGE_END] + ([NEW_LINE, grid_token_name(rows // 2), grid_token_name(cols // 2)] if style == "lumina" else [BOS])
        missing = [n for n in names if n not in vocab]
        if missing or not len(self.image_ids):
            raise ValueError(f"the model's vocabulary_map lacks {', '.join(missing) or 'image tokens (IMGIMG...)'}: not a Chameleon image model")
        self.image_start_id, self.image_end_id = vocab[IMAGE_START], vocab[IMAGE_END]
        self.new_line_id = vocab[NEW_LINE] if style == "lumina" else None
        self.prefix = [self.image_start_id]
        if style == "lumina":
            self.prefix += [vocab[grid_token_name(rows // 2)], vocab[grid_token_name(cols // 2)]]
        # what the unconditional rows run before the image: Lumina-mGPT's the image prefix alone,
        # Anole's (LANTERN's `generate`) `<s>` and the image start
        self.unconditional_prefix = list(self.prefix) if style == "lumina" else [vocab[BOS], *self.prefix]
        self.mask_image_logits = bool(getattr(model.config, "mask_image_logits", False))

    @property
    def vocab_size(self) -> int:
        return self.model.lm_head.weight.shape[0]

    @property
    def width(self) -> int:
        """Layout columns: the image tokens of a row, and its new line (Lumina)."""
        return self.cols + (self.new_line_id is not None)

    @property
    def layout_length(self) -> int:
        return self.rows * self.width

    def layout(self) -> TokenLayout:
        """The `(rows, width)` grid: image tokens, and Lumina's forced new line in the last
        column (tensors on the model's device), with the VQGAN codebook for LANTERN and GSD."""
        device = self.model.lm_head.weight.device
        allowed = torch.zeros(self.vocab_size, dtype=torch.bool, device=device)
        allowed[self.image_ids.to(device)] = True
        forced = None
        if self.new_line_id is not None:
            forced = torch.full((self.rows, self.width), -1, dtype=torch.long, device=device)
            forced[:, self.cols] = self.new_line_id
            forced = forced.flatten()
        return TokenLayout.grid((self.rows, self.width), self.vocab_size, allowed=allowed, forced=forced,
                                token_embeddings=self.token_embeddings())

    def token_embeddings(self) -> torch.Tensor:
        """`[V, embed_dim]`: the VQGAN codebook vector of every image token, zeros elsewhere."""
        codebook = self.decoder.vqmodel.quantize.embedding.weight.detach().float()  # [codes, E]
        bpe2img = self.decoder.vocabulary_mapping.bpe2img  # token id -> code
        table = codebook.new_zeros(self.vocab_size, codebook.shape[1])
        tokens = torch.tensor(list(bpe2img.keys()), dtype=torch.long, device=codebook.device)
        codes = torch.tensor(list(bpe2img.values()), dtype=torch.long, device=codebook.device)
        table[tokens] = codebook[codes]
        return table

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Lumina-mGPT's scoring: `lm_head`, float32, image tokens masked only when configured."""
        logits = self.model.lm_head(hidden).float()  # [R, n, V]
        if self.mask_image_logits:
            logits[..., self.image_ids.to(logits.device)] = torch.finfo(logits.dtype).min
        return logits

    def image_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """Generated layout tokens `[B, layout_length]` -> VQGAN codes `[B, rows, cols]`."""
        grid = tokens.view(-1, self.rows, self.width)[..., : self.cols]
        lookup = torch.full((self.vocab_size,), -1, dtype=torch.long, device=tokens.device)
        bpe2img = self.decoder.vocabulary_mapping.bpe2img
        lookup[torch.tensor(list(bpe2img.keys()), device=tokens.device)] = torch.tensor(list(bpe2img.values()), device=tokens.device)
        codes = lookup[grid]
        if bool((codes < 0).any()):
            raise ValueError("tokens hold a non-image token where the layout puts an image token")
        return codes

    def sequence(self, tokens: torch.Tensor) -> torch.Tensor:
        """The whole image block `[B, len(prefix) + layout_length + 1]`, as the model writes it."""
        B = tokens.shape[0]
        prefix = torch.tensor(self.prefix, dtype=torch.long, device=tokens.device).expand(B, -1)
        return torch.cat([prefix, tokens, tokens.new_full((B, 1), self.image_end_id)], 1)

    def _rows(self, condition: ChameleonCondition, guided: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and bool mask `[R, P]`: the prompts and the image prefix, then (guided)
        the unconditional prefix (Lumina: the image prefix alone; Anole: `<s>` and the image
        start), left-padded."""
        ids = torch.as_tensor(condition.input_ids)
        if ids.dim() != 2 or ids.shape[0] == 0:
            raise ValueError(f"input_ids must be a [B, P] batch, got {tuple(ids.shape)}")
        mask = torch.ones_like(ids) if condition.attention_mask is None else torch.as_tensor(condition.attention_mask)
        if mask.shape != ids.shape:
            raise ValueError(f"attention_mask {tuple(mask.shape)} and input_ids {tuple(ids.shape)} differ in shape")
        B = ids.shape[0]
        prefix = torch.tensor(self.prefix, dtype=ids.dtype, device=ids.device).expand(B, -1)
        ids, mask = torch.cat([ids, prefix], 1), torch.cat([mask, torch.ones_like(prefix)], 1)
        if not guided:
            return ids, mask.bool()
        pad = self.model.config.pad_token_id
        pad = 0 if pad is None else pad
        null = torch.tensor(self.unconditional_prefix, dtype=ids.dtype, device=ids.device).expand(B, -1)
        length = max(ids.shape[1], null.shape[1])  # Anole's null row may outgrow an empty prompt's
        ids, mask = left_pad(ids, mask, length, pad)
        null, null_mask = left_pad(null, torch.ones_like(null), length, pad)
        return torch.cat([ids, null]), torch.cat([mask, null_mask]).bool()

    @torch.no_grad()
    def start(self, condition: ChameleonCondition, *, guided: bool, extra_positions: int = 0) -> DecoderSession:
        """Prefills the prompts with the image prefix (and the unconditional prefix when
        `guided`); returns the session.

        Args:
            condition (`ChameleonCondition`): tokenized prompts, without the image prefix.
            guided (`bool`): also run the unconditional rows, for classifier-free guidance.
            extra_positions (`int`): scratch positions past the end, for overhanging windows.
        """
        ids, mask = self._rows(condition, guided)
        return DecoderSession.from_token_ids(self.decoder, self.head, ids, mask, batch_size=len(condition.input_ids),
                                             guided=guided, steps=self.layout_length, extra_positions=extra_positions)
