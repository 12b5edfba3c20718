"""A LlamaGen GPT over video tokens: frames of VQ codes, one after another, with 3-D RoPE.

The transformer, the label embedding, the cached session and the KV cache are LlamaGen's
(`mmspec.models.networks.llamagen`); two things change. The sequence is `frames` token grids of
`frame_grid x frame_grid` in (frame, row, col) order, and the rotary positions are
three-dimensional: a head's rotated pairs are split in three groups that turn with the
frame, the row and the column index. A query then sees the token at the same (row, col)
of the previous frame at a fixed relative rotation whatever the frame, which is what a
video model mostly copies; with one-dimensional positions that relation would be 64
positions back, learnt as an offset (Emu3 does this, with end-of-line and end-of-frame
separators giving it landmarks). Our frames have no separators: every position is a
token of the grid.

Example:
    >>> import torch
    >>> from mmspec.models.networks.video_llamagen import VideoLlamaGenConfig, VideoLlamaGen
    >>> model = VideoLlamaGen(VideoLlamaGenConfig(dim=48, n_layer=1, n_head=2, vocab_size=32, frames=2, block_size=32, num_classes=3))
    >>> model.layout().shape, model(torch.zeros(1, 32, dtype=torch.long), torch.tensor([1])).shape
    ((2, 4, 4), torch.Size([1, 32, 32]))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mmspec.core.layout import TokenLayout
from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT


@dataclass
class VideoLlamaGenConfig(LlamaGenConfig):
    """`LlamaGenConfig` with `frames`: `block_size` tokens are `frames` square grids.
    Class-conditional (c2i) only."""

    config_name = "video LlamaGen config"

    frames: int = 8

    def __post_init__(self):
        if self.model_type != "c2i":
            raise ValueError(f"a video LlamaGen is class-conditional (model_type 'c2i'), got {self.model_type!r}")
        if self.dim % self.n_head or self.n_head % self.kv_heads:
            raise ValueError(f"dim {self.dim}, n_head {self.n_head} and n_kv_head {self.n_kv_head} do not divide")
        if self.head_dim % 2 or self.head_dim < 6:
            raise ValueError(f"head_dim {self.head_dim} must be even and >= 6 for the 3-D RoPE (three groups of pairs)")
        per_frame = self.block_size // self.frames if self.frames >= 1 else 0
        if self.frames < 1 or per_frame * self.frames != self.block_size or math.isqrt(per_frame) ** 2 != per_frame:
            raise ValueError(f"block_size {self.block_size} is not {self.frames} square frames of tokens")

    @property
    def grid_size(self) -> int:
        """Tokens per side of one frame."""
        return math.isqrt(self.block_size // self.frames)


def rope_3d(frames: int, grid_size: int, head_dim: int, base: float, prefix_len: int) -> torch.Tensor:
    """`[prefix_len + frames * grid_size**2, head_dim // 2, 2]` (cos, sin): the first group of
    rotated pairs turns with the frame index, the next two with the row and the column
    (each spatial group a third of the pairs, rounded down; the frame group the rest).
    Prefix rows are the identity rotation (cos 1, sin 0). LlamaGen's 2-D table has zero
    rows there, which zeroes the class token's query and key: every query then gives the
    class token the fixed logit 0, a share of attention that shrinks as the sequence grows.
    Over 512 video tokens a model trained that way ignored its class (held-out loss with the
    true class and with the null class differed by 0.01 nats a token); with the identity a
    query can attend to the class token by content."""
    pairs = head_dim // 2
    spatial = pairs // 3
    groups = (pairs - 2 * spatial, spatial, spatial)
    coords = TokenLayout.grid((frames, grid_size, grid_size), 1).coords.float()  # [T, 3]
    angles = [torch.outer(coords[:, a], 1.0 / base ** (torch.arange(n).float() / n)) for a, n in enumerate(groups)]
    angles = torch.cat(angles, dim=-1)  # [T, pairs]
    table = torch.stack([angles.cos(), angles.sin()], dim=-1)
    identity = torch.stack([torch.ones(prefix_len, pairs), torch.zeros(prefix_len, pairs)], dim=-1)
    return torch.cat([identity, table])


class VideoLlamaGen(LlamaGenGPT):
    """LlamaGen over `frames` grids of tokens with 3-D rotary positions; a TokenModel whose
    layout has the axes (frame, row, col)."""

    def rope_pairs(self) -> torch.Tensor:
        c = self.config
        return rope_3d(c.frames, c.grid_size, c.head_dim, c.rope_base, c.cls_token_num)

    def layout(self, token_embeddings: torch.Tensor | None = None) -> TokenLayout:
        c = self.config
        return TokenLayout.grid((c.frames, c.grid_size, c.grid_size), c.vocab_size, token_embeddings=token_embeddings)
