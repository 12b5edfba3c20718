"""LlamaGen's VQ image tokenizer (VQ-8, VQ-16), checkpoint-compatible with the original.

Same module names and numerics as FoundationVision/LlamaGen
`tokenizer/tokenizer_image/vq_model.py`: a taming-style encoder/decoder (GroupNorm(32),
swish, attention at the lowest resolution, asymmetric-pad strided downsampling), and a
codebook quantiser on l2-normalised vectors. Images are float `[B, 3, H, W]` in [-1, 1];
codes are long `[B, h*w]`, row-major.

Beyond the original: the base width (`base_channels`, 128 there) and the residual blocks
per level are configurable so that a tokenizer trains on a CPU; the defaults load original
checkpoints. The usage counter `quantize.codebook_used` of training is not kept.

Example:
    >>> import torch
    >>> from mmspec.tokenizers.llamagen_vq import VQConfig, LlamaGenVQ
    >>> vq = LlamaGenVQ(VQConfig(codebook_size=64, encoder_ch_mult=[1, 1], decoder_ch_mult=[1, 1], z_channels=16, base_channels=32)).eval()
    >>> codes = vq.encode(torch.zeros(1, 3, 8, 8))
    >>> codes.shape, vq.decode(codes).shape
    (torch.Size([1, 16]), torch.Size([1, 3, 8, 8]))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from mmspec.utils.checkpoint import DeviceDtypeMixin, JSONConfig, load_into, read_state_dict


@dataclass
class VQConfig(JSONConfig):
    """The original VQ `ModelArgs` (same names and defaults) plus the CPU-size knobs."""

    config_name = "VQ config"

    codebook_size: int = 16384
    codebook_embed_dim: int = 8
    codebook_l2_norm: bool = True
    codebook_show_usage: bool = True  # training-time usage counter; accepted, not kept
    commit_loss_beta: float = 0.25
    entropy_loss_ratio: float = 0.0
    encoder_ch_mult: list[int] = field(default_factory=lambda: [1, 1, 2, 2, 4])
    decoder_ch_mult: list[int] = field(default_factory=lambda: [1, 1, 2, 2, 4])
    z_channels: int = 256
    dropout_p: float = 0.0
    base_channels: int = 128  # hard-coded `ch` of the original
    num_res_blocks: int = 2

    PRESETS = {
        "VQ-16": dict(encoder_ch_mult=[1, 1, 2, 2, 4], decoder_ch_mult=[1, 1, 2, 2, 4]),
        "VQ-8": dict(encoder_ch_mult=[1, 2, 2, 4], decoder_ch_mult=[1, 2, 2, 4]),
    }

    def __post_init__(self):
        widths = [self.base_channels * m for m in [*self.encoder_ch_mult, *self.decoder_ch_mult]]
        if any(w % 32 for w in widths):
            raise ValueError(f"VQ channel widths {sorted(set(widths))} must be multiples of 32 (GroupNorm(32))")

    def weight_count(self) -> int:
        """About the weights of a `LlamaGenVQ` of this config (3x3 convolutions of every
        resolution's blocks, encoder and decoder, the middle blocks, the codebook)."""
        enc = [self.base_channels * m for m in self.encoder_ch_mult]
        dec = [self.base_channels * m for m in self.decoder_ch_mult]
        convs = sum((2 * self.num_res_blocks + 1) * w * w for w in enc) + sum((2 * self.num_res_blocks + 3) * w * w for w in dec)
        middle = 6 * (enc[-1] ** 2 + dec[-1] ** 2) if enc and dec else 0
        ends = 9 * self.z_channels * (sum(enc[-1:]) + sum(dec[-1:])) + 2 * self.z_channels * self.codebook_embed_dim
        return 9 * convs + middle + ends + self.codebook_size * self.codebook_embed_dim

    @property
    def downsample(self) -> int:
        return 2 ** (len(self.encoder_ch_mult) - 1)

    @classmethod
    def from_name(cls, name: str, **overrides) -> "VQConfig":
        if name not in cls.PRESETS:
            raise ValueError(f"unknown VQ config {name!r}; choose from {', '.join(cls.PRESETS)}")
        return cls.from_dict({**cls.PRESETS[name], **overrides})


def swish(x):
    return x * torch.sigmoid(x)


def group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(32, channels, eps=1e-6)


class ResnetBlock(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.norm1, self.conv1 = group_norm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2, self.conv2 = group_norm(cout), nn.Conv2d(cout, cout, 3, padding=1)
        if cin != cout:
            self.nin_shortcut = nn.Conv2d(cin, cout, 1)

    def forward(self, x):
        h = self.conv1(swish(self.norm1(x)))
        h = self.conv2(swish(self.norm2(h)))
        return (self.nin_shortcut(x) if hasattr(self, "nin_shortcut") else x) + h


class AttnBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.norm = group_norm(channels)
        self.q, self.k, self.v, self.proj_out = (nn.Conv2d(channels, channels, 1) for _ in range(4))

    def forward(self, x):
        B, C, H, W = x.shape
        h = self.norm(x)
        q = self.q(h).flatten(2).transpose(1, 2)  # (B, HW, C)
        k = self.k(h).flatten(2)  # (B, C, HW)
        v = self.v(h).flatten(2)  # (B, C, HW)
        w = torch.softmax(torch.bmm(q, k) * C**-0.5, dim=2)  # (B, HW query, HW key)
        out = torch.bmm(v, w.transpose(1, 2)).reshape(B, C, H, W)
        return x + self.proj_out(out)


class Downsample(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, stride=2)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1)))  # asymmetric padding, as taming


class Upsample(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


def run_level(h: torch.Tensor, res: nn.ModuleList, attn: nn.ModuleList) -> torch.Tensor:
    """One resolution level: its residual blocks, each followed by its attention block
    where the level has them."""
    for i, block in enumerate(res):
        h = block(h)
        if len(attn):
            h = attn[i](h)
    return h


def mid_blocks(channels: int) -> nn.ModuleList:
    return nn.ModuleList([ResnetBlock(channels, channels), AttnBlock(channels), ResnetBlock(channels, channels)])


class Encoder(nn.Module):
    def __init__(self, c: VQConfig):
        super().__init__()
        ch, mult = c.base_channels, c.encoder_ch_mult
        self.conv_in = nn.Conv2d(3, ch, 3, padding=1)
        self.conv_blocks = nn.ModuleList()
        cin = ch
        for level, m in enumerate(mult):
            block = nn.Module()
            last = level == len(mult) - 1
            block.res = nn.ModuleList()
            block.attn = nn.ModuleList()
            for _ in range(c.num_res_blocks):
                block.res.append(ResnetBlock(cin, ch * m))
                cin = ch * m
                if last:
                    block.attn.append(AttnBlock(cin))
            if not last:
                block.downsample = Downsample(cin)
            self.conv_blocks.append(block)
        self.mid = mid_blocks(cin)
        self.norm_out = group_norm(cin)
        self.conv_out = nn.Conv2d(cin, c.z_channels, 3, padding=1)

    def forward(self, x):
        h = self.conv_in(x)
        for block in self.conv_blocks:
            h = run_level(h, block.res, block.attn)
            if hasattr(block, "downsample"):
                h = block.downsample(h)
        for m in self.mid:
            h = m(h)
        return self.conv_out(swish(self.norm_out(h)))


class Decoder(nn.Module):
    def __init__(self, c: VQConfig):
        super().__init__()
        ch, mult = c.base_channels, c.decoder_ch_mult
        cin = ch * mult[-1]
        self.conv_in = nn.Conv2d(c.z_channels, cin, 3, padding=1)
        self.mid = mid_blocks(cin)
        self.conv_blocks = nn.ModuleList()
        for level in reversed(range(len(mult))):
            block = nn.Module()
            first = level == len(mult) - 1  # the lowest resolution, where attention is
            block.res = nn.ModuleList()
            block.attn = nn.ModuleList()
            for _ in range(c.num_res_blocks + 1):
                block.res.append(ResnetBlock(cin, ch * mult[level]))
                cin = ch * mult[level]
                if first:
                    block.attn.append(AttnBlock(cin))
            if level != 0:
                block.upsample = Upsample(cin)
            self.conv_blocks.append(block)
        self.norm_out = group_norm(cin)
        self.conv_out = nn.Conv2d(cin, 3, 3, padding=1)

    def forward(self, z):
        h = self.conv_in(z)
        for m in self.mid:
            h = m(h)
        for block in self.conv_blocks:
            h = run_level(h, block.res, block.attn)
            if hasattr(block, "upsample"):
                h = block.upsample(h)
        return self.conv_out(swish(self.norm_out(h)))


class VectorQuantizer(nn.Module):
    def __init__(self, c: VQConfig):
        super().__init__()
        self.l2_norm = c.codebook_l2_norm
        self.embedding = nn.Embedding(c.codebook_size, c.codebook_embed_dim)
        nn.init.uniform_(self.embedding.weight, -1.0 / c.codebook_size, 1.0 / c.codebook_size)
        if self.l2_norm:
            with torch.no_grad():
                self.embedding.weight.copy_(F.normalize(self.embedding.weight, dim=-1))

    def codebook(self) -> torch.Tensor:
        """`[V, E]`, l2-normalised when the config says so."""
        w = self.embedding.weight
        return F.normalize(w, dim=-1) if self.l2_norm else w

    def nearest(self, z: torch.Tensor) -> torch.Tensor:
        """Codes `[N]` of vectors `z [N, E]`, by squared distance (as the original computes it)."""
        e = self.codebook()
        if self.l2_norm:
            z = F.normalize(z, dim=-1)
        d = z.pow(2).sum(1, keepdim=True) + e.pow(2).sum(1) - 2 * z @ e.t()
        return d.argmin(1)


class LlamaGenVQ(DeviceDtypeMixin, nn.Module):
    """Encoder, quantiser and decoder. `encode`/`decode` are the codec; `quantize` gives the
    straight-through training path."""

    IGNORED_KEYS = ("quantize.codebook_used",)

    def __init__(self, config: VQConfig):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        self.quantize = VectorQuantizer(config)
        self.quant_conv = nn.Conv2d(config.z_channels, config.codebook_embed_dim, 1)
        self.post_quant_conv = nn.Conv2d(config.codebook_embed_dim, config.z_channels, 1)

    @classmethod
    def from_checkpoint(cls, path_or_state_dict, config: VQConfig, container_key: str | None = None) -> "LlamaGenVQ":
        """Loads an original LlamaGen VQ checkpoint (`vq_ds16_c2i.pt`: weights under `model`)
        or a safetensors file into a tokenizer of `config`; float16 weights are upcast."""
        vq = cls(config)
        load_into(vq, read_state_dict(path_or_state_dict, container_key), ignore=cls.IGNORED_KEYS, what="LlamaGen VQ checkpoint")
        return vq.eval()

    @property
    def codebook(self) -> torch.Tensor:
        """The token embeddings `[V, E]` (l2-normalised) for latent-neighbourhood rules."""
        return self.quantize.codebook().detach()

    def latent(self, images: torch.Tensor) -> torch.Tensor:
        """Pre-quantisation latents `[B, E, h, w]` of images `[B, 3, H, W]` in [-1, 1]."""
        return self.quant_conv(self.encoder(images))

    def quantize_latent(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Codes `[B, h*w]` and quantised latents `[B, E, h, w]` of `z`."""
        B, E, h, w = z.shape
        codes = self.quantize.nearest(z.permute(0, 2, 3, 1).reshape(-1, E)).view(B, h * w)
        return codes, self.embed_codes(codes, (h, w))

    @torch.no_grad()
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Codes `[B, h*w]` (row-major) of images `[B, 3, H, W]` in [-1, 1]."""
        c = self.config
        H, W = images.shape[-2:]
        if images.dim() != 4 or images.shape[1] != 3 or H % c.downsample or W % c.downsample:
            raise ValueError(f"images must be [B, 3, H, W] with H, W multiples of {c.downsample}, got {tuple(images.shape)}")
        return self.quantize_latent(self.latent(images.to(self.quant_conv.weight)))[0]

    def embed_codes(self, codes: torch.Tensor, hw: tuple[int, int] | None = None) -> torch.Tensor:
        """Quantised latents `[B, E, h, w]` of codes `[B, h*w]` (square grid unless `hw`)."""
        B, n = codes.shape
        h, w = hw or (math.isqrt(n), math.isqrt(n))
        if h * w != n:
            raise ValueError(f"{n} codes do not fill a {h}x{w} grid")
        if int(codes.min()) < 0 or int(codes.max()) >= self.config.codebook_size:
            raise ValueError(f"codes must lie in [0, {self.config.codebook_size}), got [{int(codes.min())}, {int(codes.max())}]")
        return self.quantize.codebook()[codes].view(B, h, w, -1).permute(0, 3, 1, 2)

    def decode_latent(self, z_q: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.post_quant_conv(z_q))

    @torch.no_grad()
    def decode(self, codes: torch.Tensor, hw: tuple[int, int] | None = None) -> torch.Tensor:
        """Images `[B, 3, H, W]`, about [-1, 1] (not clamped: the decoder may overshoot a little; the
        pipelines clamp), of codes `[B, h*w]` (row-major).

        Each image is decoded alone: a batched convolution may sum in another order, and its
        pixels would then differ from the same codes decoded alone by a rounding step."""
        codes = codes.to(self.quant_conv.weight.device)
        return torch.cat([self.decode_latent(self.embed_codes(row[None], hw)) for row in codes])
