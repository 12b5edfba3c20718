"""MeshXL models for the engine: an OPT over MeshXL sequences as a `TokenModel`.

MeshXL checkpoints are plain transformers `OPTForCausalLM` folders with 131 ids (see
`mmspec.tokenizers.mesh`). A class-conditional model (the shipped one) appends one id per
class after them, `class_token_offset + label` with the offset 131, and is prompted with
`[class token, <bos>]`; an unconditional one with `<bos>` alone.

The layout places generated position t at face `t // 9`, slot `t % 9` (axes
`("face", "slot")`), so a drafter can copy along faces. Constrained (the default), a
position holds a coordinate level, or `<eos>` at the start of a face after the first;
the last position, after `max_faces` faces, holds `<eos>` only.
"""

from __future__ import annotations

import torch
from transformers import OPTConfig

from mmspec.core.layout import TokenLayout
from mmspec.models.adapters.transformers_lm import TransformersLM
from mmspec.tokenizers.mesh import BOS, EOS, LEVELS, PAD, TOKENS_PER_FACE, VOCAB_SIZE

MAX_POSITIONS = 512  # prompt + 48 faces x 9 + <eos> = 435 tokens at most in training


def mesh_opt_config(num_classes: int, hidden: int = 128, layers: int = 4, heads: int = 2) -> OPTConfig:
    """A small OPT over MeshXL's 131 ids plus `num_classes` class ids."""
    return OPTConfig(
        vocab_size=VOCAB_SIZE + num_classes, hidden_size=hidden, num_hidden_layers=layers, ffn_dim=4 * hidden,
        num_attention_heads=heads, max_position_embeddings=MAX_POSITIONS, word_embed_proj_dim=hidden,
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, dropout=0.0, attention_dropout=0.0,
    )


def mesh_layout(max_faces: int, vocab_size: int, constrain: bool = True) -> TokenLayout:
    """`max_faces * 9 + 1` positions on axes ("face", "slot"); see the module docstring."""
    T = max_faces * TOKENS_PER_FACE + 1
    t = torch.arange(T)
    coords = torch.stack([t // TOKENS_PER_FACE, t % TOKENS_PER_FACE], 1)
    allowed = None
    if constrain:
        allowed = torch.zeros(T, vocab_size, dtype=torch.bool)
        allowed[:-1, :LEVELS] = True
        allowed[TOKENS_PER_FACE :: TOKENS_PER_FACE, EOS] = True  # face starts after the first, and the end
    return TokenLayout(axes=("face", "slot"), coords=coords, vocab_size=vocab_size, allowed=allowed)


def mesh_prompts(labels: list[int] | None, batch: int, class_token_offset: int | None) -> dict:
    """`input_ids` `[B, 1 or 2]`: `[class token, <bos>]` per label, or `<bos>` alone."""
    if labels is None:
        ids = torch.full((batch, 1), BOS)
    else:
        ids = torch.tensor([[class_token_offset + label, BOS] for label in labels])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


class MeshXLModel:
    """An OPT over MeshXL sequences (`OPTForCausalLM`) as a TokenModel: the transformers
    adapter's sessions, with the mesh layout."""

    def __init__(self, model, max_faces: int, constrain: bool = True):
        self.model, self.max_faces, self.constrain = model, max_faces, constrain
        self.lm = TransformersLM(model, max_new_tokens=max_faces * TOKENS_PER_FACE + 1)

    def layout(self) -> TokenLayout:
        return mesh_layout(self.max_faces, self.lm.vocab_size, self.constrain)

    def start(self, condition: dict, *, guided: bool = False, extra_positions: int = 0):
        return self.lm.start(condition, guided=guided, extra_positions=extra_positions)
