"""Janus / Janus-Pro (DeepSeek 2025) image generation as a TokenModel, over transformers'
`JanusForConditionalGeneration`.

Janus generates an image as `S x S` codes of its VQ (LlamaGen's VQ-16) after a prompt that
ends with the begin-of-image token (`JanusProcessor(text, generation_mode="image")`). Its
image mode differs from its text mode at both ends of the language model, and we follow
transformers' `generate(..., generation_mode="image")`:

* a generated code enters as `generation_aligner(generation_embeddings(code))`, not as a
  text embedding;
* logits over the codes come from `generation_head`, not `lm_head`;
* the CFG rows run the prompt with every token but BOS and the begin-of-image token
  replaced by PAD.

One difference, for left-padded batches only: transformers' image loop passes no position
ids, so its padding shifts the positions of a padded row; we use `cumsum(mask) - 1` as its
text generation does, so a prompt gives the same image alone or in a padded batch.

Example:
    >>> from transformers import JanusForConditionalGeneration, JanusProcessor  # doctest: +SKIP
    >>> model = JanusForConditionalGeneration.from_pretrained("deepseek-community/Janus-Pro-7B")  # doctest: +SKIP
    >>> processor = JanusProcessor.from_pretrained("deepseek-community/Janus-Pro-7B")  # doctest: +SKIP
    >>> enc = processor(text=["a cat"], generation_mode="image", return_tensors="pt")  # doctest: +SKIP
    >>> session = JanusImageGenerator(model).start(JanusCondition(enc.input_ids, enc.attention_mask), guided=True)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmspec.core.layout import TokenLayout
from mmspec.models.cache.hf_session import DecoderSession


@dataclass
class JanusCondition:
    """Tokenized prompts `input_ids [B, P]` with `attention_mask [B, P]` (1 at real tokens,
    padding on the left), each ending with the begin-of-image token."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None = None


class JanusImageGenerator:
    """`JanusForConditionalGeneration` generating one `S x S`-code image per prompt.

    The special tokens of the CFG rows come from `model.generation_config`: `bos_token_id`,
    `pad_token_id` and `generation_kwargs["boi_token_id"]`, as transformers reads them.
    """

    def __init__(self, model):
        self.model = model
        self.decoder = model.model.language_model
        gen = model.generation_config
        self.boi_token_id = (gen.generation_kwargs or {}).get("boi_token_id")
        self.bos_token_id, self.pad_token_id = gen.bos_token_id, gen.pad_token_id
        if None in (self.boi_token_id, self.bos_token_id, self.pad_token_id):
            raise ValueError(
                "model.generation_config needs bos_token_id, pad_token_id and generation_kwargs['boi_token_id'] "
                f"(got {self.bos_token_id}, {self.pad_token_id}, {self.boi_token_id}) to build Janus' CFG rows"
            )
        rows, cols = model.model.vqmodel.quantize.quant_state_dims
        self.grid = (rows, cols)
        tokens = model.model.vision_model.config.num_image_tokens
        if rows * cols != tokens:
            raise ValueError(f"the VQ decodes {rows}x{cols} codes but the model generates {tokens} image tokens")

    def layout(self) -> TokenLayout:
        """The `S x S` grid over the VQ codes, with the codebook for LANTERN and GSD."""
        codebook = self.model.model.vqmodel.quantize.embedding.weight.detach().float()  # [V, E]
        return TokenLayout.grid(self.grid, codebook.shape[0], token_embeddings=codebook)

    def unconditional_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """The prompt with every token but BOS and begin-of-image replaced by PAD."""
        keep = (ids == self.bos_token_id) | (ids == self.boi_token_id)
        return torch.where(keep, ids, torch.full_like(ids, self.pad_token_id))

    @torch.no_grad()
    def start(self, condition: JanusCondition, *, guided: bool, extra_positions: int = 0) -> DecoderSession:
        """Prefills the prompts (and their CFG rows when `guided`); returns the session.

        Args:
            condition (`JanusCondition`): tokenized prompts ending with the begin-of-image token.
            guided (`bool`): also run the unconditional rows, for classifier-free guidance.
            extra_positions (`int`): scratch positions past the end, for overhanging windows.
        """
        ids = torch.as_tensor(condition.input_ids)
        if ids.dim() != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
            raise ValueError(f"input_ids must be a non-empty [B, P] batch, got {tuple(ids.shape)}")
        mask = torch.ones_like(ids) if condition.attention_mask is None else torch.as_tensor(condition.attention_mask)
        if guided:
            ids, mask = torch.cat([ids, self.unconditional_ids(ids)]), torch.cat([mask, mask])
        device = self.decoder.embed_tokens.weight.device
        ids, mask = ids.to(device), mask.to(device).bool()
        rows, cols = self.grid
        return DecoderSession(
            self.decoder, self.model.prepare_embeddings_for_image_generation, self.model.model.generation_head,
            self.decoder.embed_tokens(ids), mask,
            batch_size=len(condition.input_ids), guided=guided, steps=rows * cols, extra_positions=extra_positions,
        )
