"""Emu3's video tokenizer (transformers' `Emu3VQVAE`, with temporal downsampling) and the token
layout of an Emu3 video sequence.

Emu3's VQ-VAE encodes a clip of `T` frames into `T / temporal_downsample_factor` latent
frames of `h x w` codes (4x temporally and 8x spatially in the released checkpoints). In
Emu3's sequences every row of codes ends with an end-of-line token and every frame with
an end-of-frame token; `emu3_video_layout` places those separators on the (frame, row,
col) axes (the end-of-line token at column `w`, the end-of-frame token at row `h`) as
forced positions, so previous-frame drafts and frame schedules work on real Emu3 video
sequences as on our grid.

Example:
    >>> import torch
    >>> from transformers import Emu3VQVAEConfig
    >>> codec = Emu3VideoCodec.from_config(Emu3VQVAEConfig(codebook_size=32, base_channels=32, channel_multiplier=[1, 1],
    ...     num_res_blocks=1, attn_resolutions=[], temporal_downsample_factor=2, hidden_size=32))
    >>> codes = codec.encode(torch.zeros(1, 4, 3, 16, 16))
    >>> codes.shape, codec.decode(codes).shape
    (torch.Size([1, 2, 8, 8]), torch.Size([1, 4, 3, 16, 16]))
"""

from __future__ import annotations

import torch

from mmspec.core.layout import TokenLayout


class Emu3VideoCodec:
    """Clips `[B, T, 3, H, W]` in [-1, 1] <-> codes `[B, T / t, H / s, W / s]` through an Emu3 VQ-VAE
    (`t` its temporal, `s` its spatial downsampling)."""

    def __init__(self, vqvae):
        self.vqvae = vqvae.eval()

    @classmethod
    def from_config(cls, config) -> "Emu3VideoCodec":
        """A randomly initialised VQ-VAE of `config` (an `Emu3VQVAEConfig`), for tests and shapes."""
        from transformers import Emu3VQVAE

        return cls(Emu3VQVAE(config))

    @property
    def temporal_factor(self) -> int:
        return self.vqvae.config.temporal_downsample_factor

    @property
    def spatial_factor(self) -> int:
        return self.vqvae.vision_spatial_factor

    @torch.no_grad()
    def encode(self, video: torch.Tensor) -> torch.Tensor:
        """Codes `[B, T / t, h, w]` of `video [B, T, 3, H, W]` in [-1, 1]."""
        t, s = self.temporal_factor, self.spatial_factor
        if video.dim() != 5 or video.shape[2] != 3 or video.shape[1] % t or video.shape[3] % s or video.shape[4] % s:
            raise ValueError(f"video must be [B, T, 3, H, W] with T a multiple of {t} and H, W multiples of {s}, "
                             f"got {tuple(video.shape)}")
        B, _, _, H, W = video.shape
        sizes = torch.tensor([[H, W]] * B)
        return torch.stack(self.vqvae.encode(video.to(self.vqvae.dtype), sizes).image_tokens)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Clips `[B, T, 3, H, W]` of `codes [B, T / t, h, w]`."""
        if codes.dim() != 4:
            raise ValueError(f"codes must be [B, latent frames, h, w], got {tuple(codes.shape)}")
        return self.vqvae.decode(codes).float()


def emu3_video_layout(frames: int, rows: int, cols: int, vocab_size: int, eol_token_id: int, eof_token_id: int,
                      allowed: torch.Tensor | None = None) -> TokenLayout:
    """The (frame, row, col) layout of an Emu3 video sequence: per frame, `rows` rows of `cols`
    visual tokens each followed by the end-of-line token (column `cols`), then the
    end-of-frame token (row `rows`, column 0); both separators forced.

    Args:
        allowed (`torch.Tensor`, *optional*): bool `[V]`, the visual token ids (the
            separators are allowed where forced whatever this says).
    """
    per_frame = [(r, c) for r in range(rows) for c in range(cols + 1)] + [(rows, 0)]
    coords = torch.tensor([(f, r, c) for f in range(frames) for r, c in per_frame])
    forced = torch.full((len(coords),), -1, dtype=torch.long)
    forced[coords[:, 2] == cols] = eol_token_id
    forced[coords[:, 1] == rows] = eof_token_id
    return TokenLayout(axes=("frame", "row", "col"), coords=coords, vocab_size=vocab_size, allowed=allowed, forced=forced)
