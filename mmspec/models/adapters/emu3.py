"""Emu3 (Wang et al. 2024) image generation as a TokenModel, over transformers'
`Emu3ForConditionalGeneration`.

The condition is a tokenized prompt that ends with Emu3's image-generation prefix
`<|image start|>{H}*{W}<|image token|>` (what `Emu3Processor(..., return_for_image_generation=True)`
makes); under CFG the unconditional rows run a negative prompt, as in Emu3's recipe. The
model then writes H rows of W visual tokens, each row closed by the end-of-line token: the
layout is the grid `(H, W + 1)` with the end-of-line token forced in its last column and
the visual tokens allowed elsewhere (what Emu3's `prefix_allowed_tokens_fn` enforces). The
end-of-frame, end-of-image and end-of-sequence tokens that follow are fixed; the pipeline
appends them.

Tokens are embedded and scored exactly as transformers does (`text_model.embed_tokens`,
the decoder layers, `lm_head`); only the cache and the mask are ours (`hf_session.py`).

Example:
    >>> from transformers import Emu3ForConditionalGeneration, Emu3Processor  # doctest: +SKIP
    >>> model = Emu3ForConditionalGeneration.from_pretrained("BAAI/Emu3-Gen-hf")  # doctest: +SKIP
    >>> processor = Emu3Processor.from_pretrained("BAAI/Emu3-Gen-hf")  # doctest: +SKIP
    >>> enc = processor(text=["a cat"], return_for_image_generation=True, return_tensors="pt")  # doctest: +SKIP
    >>> neg = processor(text=["lowres"], return_for_image_generation=True, return_tensors="pt")  # doctest: +SKIP
    >>> H, W = enc.image_sizes[0]  # doctest: +SKIP
    >>> generator = Emu3ImageGenerator(model, height=H, width=W)  # doctest: +SKIP
    >>> condition = Emu3Condition(enc.input_ids, enc.attention_mask, neg.input_ids, neg.attention_mask)  # doctest: +SKIP
    >>> session = generator.start(condition, guided=True)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmspec.core.layout import TokenLayout
from mmspec.models.cache.hf_session import DecoderSession


@dataclass
class Emu3Condition:
    """Tokenized prompts `input_ids [B, P]` with `attention_mask [B, P]` (1 at real tokens,
    padding on the left), each ending with the image-generation prefix; and the negative
    prompts `[B, P']` that the unconditional rows run under CFG."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None = None
    negative_input_ids: torch.Tensor | None = None
    negative_attention_mask: torch.Tensor | None = None


def left_pad(ids: torch.Tensor, mask: torch.Tensor, length: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pads `ids, mask [B, P]` on the left to `[B, length]`."""
    extra = length - ids.shape[1]
    return (
        torch.cat([ids.new_full((ids.shape[0], extra), pad_id), ids], 1),
        torch.cat([mask.new_zeros((mask.shape[0], extra)), mask], 1),
    )


class Emu3ImageGenerator:
    """`Emu3ForConditionalGeneration` generating one `height x width`-token image per prompt.

    Args:
        model (`Emu3ForConditionalGeneration`): the transformers model (in eval mode).
        height, width (`int`): the image size in tokens (`processor(...).image_sizes[0]`).
    """

    def __init__(self, model, height: int, width: int):
        if height < 1 or width < 1:
            raise ValueError(f"image size in tokens must be positive, got {height}x{width}")
        self.model, self.height, self.width = model, height, width
        self.decoder = model.model.text_model
        mapping = model.vocabulary_mapping
        self.visual_ids = torch.tensor(mapping.image_tokens, dtype=torch.long)
        self.eol_token_id = mapping.eol_token_id
        if self.eol_token_id is None or not len(self.visual_ids):
            raise ValueError("the model's vocabulary_map has no '<|extra_200|>' end-of-line or no '<|visual token...|>' tokens")

    @property
    def vocab_size(self) -> int:
        return self.model.config.text_config.vocab_size

    @property
    def layout_length(self) -> int:
        return self.height * (self.width + 1)

    def layout(self) -> TokenLayout:
        """The `(height, width + 1)` grid: visual tokens, then the forced end-of-line token
        (tensors on the model's device, where the engine's logits are)."""
        V, H, W = self.vocab_size, self.height, self.width
        device = self.model.lm_head.weight.device
        allowed = torch.zeros(V, dtype=torch.bool, device=device)
        allowed[self.visual_ids.to(device)] = True
        forced = torch.full((H, W + 1), -1, dtype=torch.long, device=device)
        forced[:, W] = self.eol_token_id
        return TokenLayout.grid((H, W + 1), V, allowed=allowed, forced=forced.flatten(),
                           token_embeddings=self.token_embeddings())

    def token_embeddings(self) -> torch.Tensor:
        """`[V, embed_dim]`: the VQ codebook vector of every visual token, zeros elsewhere."""
        codebook = self.model.model.vqmodel.quantize.embedding.weight.detach().float()  # [codes, E]
        img2bpe = self.model.vocabulary_mapping.img2bpe  # code -> token id
        table = codebook.new_zeros(self.vocab_size, codebook.shape[1])
        codes = torch.tensor(list(img2bpe.keys()), dtype=torch.long, device=codebook.device)
        table[torch.tensor(list(img2bpe.values()), dtype=torch.long, device=codebook.device)] = codebook[codes]
        return table

    def _rows(self, condition: Emu3Condition, guided: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and bool mask `[R, P]` of the cond rows, then the negative rows if guided."""
        ids = torch.as_tensor(condition.input_ids)
        if ids.dim() != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
            raise ValueError(f"input_ids must be a non-empty [B, P] batch, got {tuple(ids.shape)}")
        mask = torch.ones_like(ids) if condition.attention_mask is None else torch.as_tensor(condition.attention_mask)
        if not guided:
            return ids, mask.bool()
        if condition.negative_input_ids is None:
            raise ValueError("guidance_scale != 1 needs negative_input_ids (Emu3's CFG runs a negative prompt)")
        neg = torch.as_tensor(condition.negative_input_ids)
        if neg.dim() != 2 or neg.shape[0] != ids.shape[0]:
            raise ValueError(f"negative_input_ids must be [{ids.shape[0]}, P'], got {tuple(neg.shape)}")
        neg_mask = torch.ones_like(neg) if condition.negative_attention_mask is None else torch.as_tensor(condition.negative_attention_mask)
        P = max(ids.shape[1], neg.shape[1])
        pad = self.model.config.text_config.pad_token_id
        ids, mask = left_pad(ids, mask, P, pad)
        neg, neg_mask = left_pad(neg, neg_mask, P, pad)
        return torch.cat([ids, neg]), torch.cat([mask, neg_mask]).bool()

    @torch.no_grad()
    def start(self, condition: Emu3Condition, *, guided: bool, extra_positions: int = 0) -> DecoderSession:
        """Prefills the prompts (and the negative prompts when `guided`); returns the session.

        Args:
            condition (`Emu3Condition`): tokenized prompts ending with the image prefix.
            guided (`bool`): also run the negative prompts, for classifier-free guidance.
            extra_positions (`int`): scratch positions past the end, for overhanging windows.
        """
        ids, mask = self._rows(condition, guided)
        return DecoderSession.from_token_ids(self.decoder, self.model.lm_head, ids, mask, batch_size=len(condition.input_ids),
                                             guided=guided, steps=self.layout_length, extra_positions=extra_positions)
