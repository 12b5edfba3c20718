"""Cosmos-Tokenize1-DV8x16x16, NVIDIA's causal discrete video tokenizer (the codec of
Cosmos-Predict1 autoregressive), checkpoint-compatible with the original.

Same module names and numerics as nvidia-cosmos/cosmos-predict1
`cosmos_predict1/tokenizer/networks/discrete_video.py` with the factorized 3D encoder and
decoder of `tokenizer/modules/layers3d.py`: a 3D Haar wavelet patcher, (1,3,3) spatial and
(3,1,1) causal temporal convolutions, per-frame GroupNorm(1), spatial and causal temporal
attention, hybrid strided-conv + average-pool down/upsampling, and finite scalar
quantisation (FSQ) with levels [8, 8, 8, 5, 5, 5]: 64,000 codes, each a 6-vector with no
stored codebook. A video is float `[B, 3, T, H, W]` in [-1, 1], `T = 1 + 8k` (the first
frame alone makes the first latent frame, as the model is causal); codes are long
`[B, 1 + k, H / 16, W / 16]`. Cosmos-Predict1 tokenizes 33 frames of 640x1024 into
5 x 40 x 64 codes.

The published weights are TorchScript archives (`encoder.jit`, `decoder.jit`), whose loading
with `torch.jit.load` runs the Python code they carry; they are read by
`mmspec.utils.torchscript_weights.read_torchscript_state_dict`, which runs none of it.

Example:
    >>> import torch
    >>> from mmspec.tokenizers.cosmos_video import CosmosVideoTokenizerConfig, CosmosVideoTokenizer
    >>> tok = CosmosVideoTokenizer(CosmosVideoTokenizerConfig(channels=4)).eval()
    >>> codes = tok.encode(torch.zeros(1, 3, 9, 32, 32))
    >>> codes.shape, tok.decode(codes).shape
    (torch.Size([1, 2, 2, 2]), torch.Size([1, 3, 9, 32, 32]))
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mmspec.utils.checkpoint import DeviceDtypeMixin, JSONConfig, check_finite, load_into, read_state_dict
from mmspec.utils.json_files import read_json, write_json
from mmspec.utils.torchscript_weights import read_torchscript_state_dict

# Buffers of the original's patchers and quantiser that the TorchScript files carry: constants
# here (the Haar filter, the FSQ levels), so not loaded; `from_pretrained` checks the levels.
CONSTANT_KEYS = ("patcher3d.wavelets", "patcher3d._arange", "patcher3d.patch_size_buffer", "unpatcher3d.wavelets",
                 "unpatcher3d._arange", "quantizer._levels", "quantizer._basis", "quantizer.implicit_codebook")


@dataclass
class CosmosVideoTokenizerConfig(JSONConfig):
    """The original's `discrete_video_8x16x16_720p` network config (same names; defaults are
    Cosmos-Tokenize1-DV8x16x16-720p's)."""

    config_name = "Cosmos video tokenizer config"

    in_channels: int = 3
    out_channels: int = 3
    channels: int = 128
    channels_mult: list[int] = field(default_factory=lambda: [2, 4, 4])
    num_res_blocks: int = 2
    attn_resolutions: list[int] = field(default_factory=lambda: [32])  # never met at 720p: attention in the middle only
    resolution: int = 1024  # the nominal size attn_resolutions are counted from, not a limit on inputs
    z_channels: int = 16
    levels: list[int] = field(default_factory=lambda: [8, 8, 8, 5, 5, 5])  # FSQ: 8*8*8*5*5*5 = 64,000 codes
    patch_size: int = 4  # two levels of 3D Haar wavelets before the first convolution
    patch_method: str = "haar"
    spatial_compression: int = 16
    temporal_compression: int = 8
    legacy_mode: bool = False  # False: the decoder's temporal upsampling mirrors the encoder's downsampling

    def __post_init__(self):
        if self.patch_method != "haar":
            raise ValueError(f"patch_method {self.patch_method!r} is not supported; the DV tokenizers use 'haar'")
        for name in ("patch_size", "spatial_compression", "temporal_compression"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, got {value}")
        for name in ("spatial_compression", "temporal_compression"):
            ups = int(math.log2(getattr(self, name))) - int(math.log2(self.patch_size))
            if not 0 <= ups <= len(self.channels_mult):
                raise ValueError(f"{name} {getattr(self, name)} needs {ups} resamplings after patch_size {self.patch_size}; "
                                 f"channels_mult {self.channels_mult} allows 0 to {len(self.channels_mult)}")
        if not self.levels or any(v < 2 for v in self.levels) or not self.channels_mult:
            raise ValueError(f"levels {self.levels} must be at least 2 each and channels_mult {self.channels_mult} non-empty")

    @property
    def codebook_size(self) -> int:
        return math.prod(self.levels)

    @property
    def embedding_dim(self) -> int:
        return len(self.levels)

    def weight_count(self) -> int:
        """About the weights (the factorized 3x3 + 3 convolutions, 12 c^2 a pair, of every block)."""
        widths = [self.channels * m for m in self.channels_mult]
        blocks = sum((2 * self.num_res_blocks + 1) * w * w for w in widths) * 24
        patched = self.in_channels * self.patch_size**3
        return blocks + 12 * widths[-1] ** 2 * 8 + 12 * (patched * self.channels + self.out_channels * patched * widths[0])


def swish(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


def frames_to_batch(x: torch.Tensor) -> torch.Tensor:
    B, C, T, H, W = x.shape
    return x.permute(0, 2, 1, 3, 4).reshape(B * T, C, H, W)  # (B*T, C, H, W)


def batch_to_frames(x: torch.Tensor, B: int) -> torch.Tensor:
    BT, C, H, W = x.shape
    return x.reshape(B, BT // B, C, H, W).permute(0, 2, 1, 3, 4)  # (B, C, T, H, W)


class CausalConv3d(nn.Module):
    """A Conv3d that sees only the past in time: the first frame repeated in front
    (`dilation * (k_t - 1) + 1 - time_stride` times) and zeros around in space."""

    def __init__(self, cin: int, cout: int, kernel_size=3, stride: int = 1, time_stride: int = 1, padding: int = 1):
        super().__init__()
        kernel_size = kernel_size if isinstance(kernel_size, tuple) else (kernel_size,) * 3
        self.time_pad = kernel_size[0] - 1 + 1 - time_stride
        self.spatial_pad = padding
        self.conv3d = nn.Conv3d(cin, cout, kernel_size, stride=(time_stride, stride, stride))

    def forward(self, x):
        x = torch.cat([x[:, :, :1].repeat(1, 1, self.time_pad, 1, 1), x], dim=2)
        p = self.spatial_pad
        return self.conv3d(F.pad(x, (p, p, p, p, 0, 0)))


def factorized_conv(cin: int, cout: int) -> nn.Sequential:
    """A 3x3 spatial convolution, then a causal 3-frame temporal one."""
    return nn.Sequential(CausalConv3d(cin, cout, (1, 3, 3), padding=1), CausalConv3d(cout, cout, (3, 1, 1), padding=0))


def pointwise(cin: int, cout: int) -> CausalConv3d:
    return CausalConv3d(cin, cout, 1, padding=0)


class FrameNorm(nn.Module):
    """GroupNorm(1) of each frame on its own (the original's `CausalNormalize(num_groups=1)`),
    so that no frame's statistics see the future."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(1, channels, eps=1e-6)

    def forward(self, x):
        return batch_to_frames(self.norm(frames_to_batch(x)), x.shape[0])


class ResnetBlock(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.norm1, self.conv1 = FrameNorm(cin), factorized_conv(cin, cout)
        self.norm2, self.conv2 = FrameNorm(cout), factorized_conv(cout, cout)
        self.nin_shortcut = pointwise(cin, cout) if cin != cout else nn.Identity()

    def forward(self, x):
        h = self.conv1(swish(self.norm1(x)))
        h = self.conv2(swish(self.norm2(h)))  # dropout 0 at inference
        return self.nin_shortcut(x) + h


class PointwiseAttention(nn.Module):
    """The parameters of both attentions: a norm, and q, k, v and the output as 1x1x1 convolutions."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = FrameNorm(channels)
        self.q, self.k, self.v, self.proj_out = (pointwise(channels, channels) for _ in range(4))


class SpatialAttention(PointwiseAttention):
    """Single-head attention among the pixels of each frame."""

    def forward(self, x):
        B, C, T, H, W = x.shape
        h = self.norm(x)
        q = frames_to_batch(self.q(h)).reshape(B * T, C, H * W).permute(0, 2, 1)  # (BT, HW, C)
        k = frames_to_batch(self.k(h)).reshape(B * T, C, H * W)  # (BT, C, HW)
        v = frames_to_batch(self.v(h)).reshape(B * T, C, H * W)  # (BT, C, HW)
        w = F.softmax(torch.bmm(q, k) * int(C) ** (-0.5), dim=2)  # (BT, HW query, HW key)
        out = torch.bmm(v, w.permute(0, 2, 1)).reshape(B * T, C, H, W)
        return x + self.proj_out(batch_to_frames(out, B))


class TemporalAttention(PointwiseAttention):
    """Single-head causal attention along time at each pixel."""

    def forward(self, x):
        B, C, T, H, W = x.shape
        h = self.norm(x)
        q, k, v = (m(h).permute(0, 3, 4, 2, 1).reshape(B * H * W, T, C) for m in (self.q, self.k, self.v))  # (BHW, T, C)
        w = torch.bmm(q, k.permute(0, 2, 1)) * int(C) ** (-0.5)  # (BHW, T query, T key)
        w = F.softmax(w.masked_fill(torch.tril(torch.ones_like(w)) == 0, float("-inf")), dim=2)
        out = torch.bmm(w, v).reshape(B, H, W, T, C).permute(0, 4, 3, 1, 2)  # (B, C, T, H, W)
        return x + self.proj_out(out)


def attention(channels: int) -> nn.Sequential:
    return nn.Sequential(SpatialAttention(channels), TemporalAttention(channels))


class Downsample(nn.Module):
    """Halves H and W (strided conv + 2x2 average) and/or T (causal strided conv + 2-frame average)."""

    def __init__(self, channels: int, spatial: bool, temporal: bool):
        super().__init__()
        self.spatial, self.temporal = spatial, temporal
        self.conv1 = CausalConv3d(channels, channels, (1, 3, 3), stride=2, padding=0) if spatial else nn.Identity()
        self.conv2 = CausalConv3d(channels, channels, (3, 1, 1), time_stride=2, padding=0) if temporal else nn.Identity()
        self.conv3 = pointwise(channels, channels) if spatial or temporal else nn.Identity()

    def forward(self, x):
        if self.spatial:
            x = F.pad(x, (0, 1, 0, 1, 0, 0))
            x = self.conv1(x) + F.avg_pool3d(x, kernel_size=(1, 2, 2), stride=(1, 2, 2))
        if self.temporal:
            x = torch.cat([x[:, :, :1], x], dim=2)  # the first frame twice: T = 1 + 2k becomes 1 + k
            x = self.conv2(x) + F.avg_pool3d(x, kernel_size=(2, 1, 1), stride=(2, 1, 1))
        return self.conv3(x)


class Upsample(nn.Module):
    """Doubles T (all frames but the first) and/or H and W by repetition, each followed by a
    residual convolution."""

    def __init__(self, channels: int, spatial: bool, temporal: bool):
        super().__init__()
        self.spatial, self.temporal = spatial, temporal
        self.conv1 = CausalConv3d(channels, channels, (3, 1, 1), padding=0) if temporal else nn.Identity()
        self.conv2 = CausalConv3d(channels, channels, (1, 3, 3), padding=1) if spatial else nn.Identity()
        self.conv3 = pointwise(channels, channels) if spatial or temporal else nn.Identity()

    def forward(self, x):
        if self.temporal and x.shape[2] > 1:
            x = x.repeat_interleave(2, dim=2)[:, :, 1:]
        if self.temporal:
            x = self.conv1(x) + x
        if self.spatial:
            x = x.repeat_interleave(2, dim=3).repeat_interleave(2, dim=4)
            x = self.conv2(x) + x
        return self.conv3(x)


# The Haar filter as the original builds it: a float32 tensor of 1/sqrt(2), low- and high-pass.
HAAR = torch.tensor([0.7071067811865476, 0.7071067811865476])


def haar_filters(channels: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    h = HAAR.to(device)
    low = h.flip(0).reshape(1, 1, -1).repeat(channels, 1, 1).to(dtype)  # (C, 1, 2)
    high = (h * (-1) ** torch.arange(2, device=device)).reshape(1, 1, -1).repeat(channels, 1, 1).to(dtype)
    return low, high


def haar_3d(x: torch.Tensor) -> torch.Tensor:
    """One level of the 3D Haar transform: `[B, C, T, H, W]` -> `[B, 8C, T/2, H/2, W/2]`,
    sub-bands ordered (time, height, width) low before high."""
    C = x.shape[1]
    low, high = haar_filters(C, x.dtype, x.device)
    x = F.pad(x, (0, 1, 0, 1, 0, 1), mode="reflect")
    along = lambda y, f, dim: F.conv3d(y, f.view(C, 1, *[2 if d == dim else 1 for d in (2, 3, 4)]), groups=C,
                                       stride=tuple(2 if d == dim else 1 for d in (2, 3, 4)))
    bands = [x]
    for dim in (2, 3, 4):
        bands = [along(b, f, dim) for b in bands for f in (low, high)]
    return torch.cat(bands, dim=1) / (2 * torch.sqrt(torch.tensor(2.0)))


def inverse_haar_3d(x: torch.Tensor) -> torch.Tensor:
    """The inverse of `haar_3d`: `[B, 8C, t, h, w]` -> `[B, C, 2t, 2h, 2w]`."""
    C = x.shape[1] // 8
    low, high = haar_filters(C, x.dtype, x.device)
    up = lambda y, f, dim: F.conv_transpose3d(y, f.view(C, 1, *[2 if d == dim else 1 for d in (2, 3, 4)]), groups=C,
                                              stride=tuple(2 if d == dim else 1 for d in (2, 3, 4)))
    bands = list(torch.chunk(x, 8, dim=1))
    for dim in (4, 3, 2):  # width first, as the original
        merged = []
        for lo, hi in zip(bands[0::2], bands[1::2]):
            y = up(lo, low, dim)
            y += up(hi, high, dim)
            merged.append(y)
        bands = merged
    return bands[0] * (2 * torch.sqrt(torch.tensor(2.0)))


class Encoder(nn.Module):
    def __init__(self, c: CosmosVideoTokenizerConfig):
        super().__init__()
        ch, mult, levels = c.channels, c.channels_mult, len(c.channels_mult)
        spatial_downs = int(math.log2(c.spatial_compression)) - int(math.log2(c.patch_size))
        temporal_downs = int(math.log2(c.temporal_compression)) - int(math.log2(c.patch_size))
        self.patch_size = c.patch_size
        self.conv_in = factorized_conv(c.in_channels * c.patch_size**3, ch)
        res = c.resolution // c.patch_size
        cin = ch
        self.down = nn.ModuleList()
        for level in range(levels):
            down = nn.Module()
            down.block, down.attn = nn.ModuleList(), nn.ModuleList()
            for _ in range(c.num_res_blocks):
                down.block.append(ResnetBlock(cin, ch * mult[level]))
                cin = ch * mult[level]
                if res in c.attn_resolutions:
                    down.attn.append(attention(cin))
            if level != levels - 1:
                down.downsample = Downsample(cin, spatial=level < spatial_downs, temporal=level < temporal_downs)
                res //= 2
            self.down.append(down)
        self.mid = nn.Module()
        self.mid.block_1, self.mid.attn_1, self.mid.block_2 = ResnetBlock(cin, cin), attention(cin), ResnetBlock(cin, cin)
        self.norm_out = FrameNorm(cin)
        self.conv_out = factorized_conv(cin, c.z_channels)

    def forward(self, x):
        # the first frame repeated to a whole patch, so that frame 0 alone makes latent frame 0
        x = torch.cat([x[:, :, :1].repeat_interleave(self.patch_size, dim=2), x[:, :, 1:]], dim=2)
        for _ in range(int(math.log2(self.patch_size))):
            x = haar_3d(x)
        h = self.conv_in(x)
        for down in self.down:
            for i, block in enumerate(down.block):
                h = block(h)
                if len(down.attn):
                    h = down.attn[i](h)
            if hasattr(down, "downsample"):
                h = down.downsample(h)
        h = self.mid.block_2(self.mid.attn_1(self.mid.block_1(h)))
        return self.conv_out(swish(self.norm_out(h)))


class Decoder(nn.Module):
    def __init__(self, c: CosmosVideoTokenizerConfig):
        super().__init__()
        ch, mult, levels = c.channels, c.channels_mult, len(c.channels_mult)
        spatial_ups = int(math.log2(c.spatial_compression)) - int(math.log2(c.patch_size))
        temporal_ups = int(math.log2(c.temporal_compression)) - int(math.log2(c.patch_size))
        self.patch_size = c.patch_size
        cin = ch * mult[-1]
        res = (c.resolution // c.patch_size) // 2 ** (levels - 1)
        self.conv_in = factorized_conv(c.z_channels, cin)
        self.mid = nn.Module()
        self.mid.block_1, self.mid.attn_1, self.mid.block_2 = ResnetBlock(cin, cin), attention(cin), ResnetBlock(cin, cin)
        ups = []
        for level in reversed(range(levels)):
            up = nn.Module()
            up.block, up.attn = nn.ModuleList(), nn.ModuleList()
            for _ in range(c.num_res_blocks + 1):
                up.block.append(ResnetBlock(cin, ch * mult[level]))
                cin = ch * mult[level]
                if res in c.attn_resolutions:
                    up.attn.append(attention(cin))
            if level != 0:
                # mirrors the encoder: the decoder's k-th upsampling undoes the encoder's k-th last downsampling
                k = levels - level - 1
                temporal = k < temporal_ups if c.legacy_mode else 0 < k < temporal_ups + 1
                spatial = temporal or (k < spatial_ups and spatial_ups > temporal_ups)
                up.upsample = Upsample(cin, spatial=spatial, temporal=temporal)
                res *= 2
            ups.insert(0, up)  # up[level], as the original indexes them
        self.up = nn.ModuleList(ups)
        self.norm_out = FrameNorm(cin)
        self.conv_out = factorized_conv(cin, c.out_channels * c.patch_size**3)

    def forward(self, z):
        h = self.mid.block_2(self.mid.attn_1(self.mid.block_1(self.conv_in(z))))
        for up in reversed(self.up):
            for i, block in enumerate(up.block):
                h = block(h)
                if len(up.attn):
                    h = up.attn[i](h)
            if hasattr(up, "upsample"):
                h = up.upsample(h)
        h = self.conv_out(swish(self.norm_out(h)))
        for _ in range(int(math.log2(self.patch_size))):
            h = inverse_haar_3d(h)
        return h[:, :, self.patch_size - 1:]  # drop the repeats of the first frame


class FSQ(nn.Module):
    """Finite scalar quantisation (Mentzer et al. 2023): each of the `len(levels)` channels
    is bounded by tanh and rounded to one of `levels[i]` values in [-1, 1]; the code index is
    the mixed-radix number of the rounded digits (first channel least significant)."""

    def __init__(self, levels: list[int]):
        super().__init__()
        self.levels = list(levels)
        basis = [math.prod(levels[:i]) for i in range(len(levels))]
        # plain tensors, not buffers: constants of the config, and absent from our state dict
        self._levels = torch.tensor(levels, dtype=torch.int32)
        self._basis = torch.tensor(basis, dtype=torch.int32)

    def indices(self, z: torch.Tensor) -> torch.Tensor:
        """Code indices `[B, t, h, w]` of latents `z [B, D, t, h, w]`."""
        z = z.movedim(1, -1)  # (B, t, h, w, D)
        levels = self._levels.to(z.device)
        half_l = (levels - 1) * (1 + 1e-3) / 2
        offset = torch.where(levels % 2 == 0, 0.5, 0.0)
        shift = (offset / half_l).atanh()  # even levels: an offset grid, symmetric after the shift
        digits = ((z + shift).tanh() * half_l - offset).round()
        half_width = levels // 2
        return ((digits + half_width).float() * self._basis.to(z.device)).sum(dim=-1).long()

    def code_vectors(self, indices: torch.Tensor) -> torch.Tensor:
        """The quantised vectors `[..., D]` in [-1, 1] of code `indices [...]`."""
        levels, basis = self._levels.to(indices.device), self._basis.to(indices.device)
        half_width = levels // 2
        digits = (indices.unsqueeze(-1) // basis) % levels
        return (digits - half_width) / half_width


class CosmosVideoTokenizer(DeviceDtypeMixin, nn.Module):
    """Encoder, FSQ and decoder of a Cosmos discrete video tokenizer. State dict keys are the
    published files' (`encoder.*`, `quant_conv.*` of `encoder.jit`; `post_quant_conv.*`,
    `decoder.*` of `decoder.jit`)."""

    def __init__(self, config: CosmosVideoTokenizerConfig):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        self.quant_conv = pointwise(config.z_channels, config.embedding_dim)
        self.post_quant_conv = pointwise(config.embedding_dim, config.z_channels)
        self.quantizer = FSQ(config.levels)

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike, config: CosmosVideoTokenizerConfig | None = None,
                        dtype: torch.dtype = torch.float32) -> "CosmosVideoTokenizer":
        """A tokenizer with the weights of `folder`: a `model.safetensors` of our state dict if it
        holds one (`save_pretrained`'s), else the published `encoder.jit` and `decoder.jit` (read
        without running their code).

        Args:
            folder (`str` or `PathLike`): the checkpoint folder (Cosmos-Tokenize1-DV8x16x16-720p).
            config (`CosmosVideoTokenizerConfig`, *optional*): by default the `config.json` that
                `save_pretrained` writes beside `model.safetensors`, else DV8x16x16's.
            dtype (`torch.dtype`, *optional*, defaults to `torch.float32`).

        Example:
            >>> tok = CosmosVideoTokenizer.from_pretrained("checkpoints/Cosmos-Tokenize1-DV8x16x16-720p")  # doctest: +SKIP
        """
        folder = Path(folder)
        if not folder.is_dir():
            raise ValueError(f"{folder} is not a folder holding a Cosmos video tokenizer (encoder.jit and decoder.jit)")
        converted = (folder / "model.safetensors").is_file()
        if config is None:
            config = CosmosVideoTokenizerConfig.from_dict(read_json(folder / "config.json", "Cosmos video tokenizer config")) \
                if converted and (folder / "config.json").is_file() else CosmosVideoTokenizerConfig()
        config.check_size()
        if converted:
            state = read_state_dict(folder / "model.safetensors")
        else:
            missing = [n for n in ("encoder.jit", "decoder.jit") if not (folder / n).is_file()]
            if missing:
                raise ValueError(f"{folder} holds no {' or '.join(missing)} (nor a model.safetensors)")
            state = {**read_torchscript_state_dict(folder / "encoder.jit"), **read_torchscript_state_dict(folder / "decoder.jit")}
            check_finite(state.items(), str(folder))
        for key in ("quantizer._levels", "inv_quant.quantizer._levels"):
            if key in state and state[key].tolist() != config.levels:
                raise ValueError(f"{folder} quantises with levels {state[key].tolist()}, the config with {config.levels}; "
                                 f"pass a config with levels={state[key].tolist()}")
        tok = cls(config)
        load_into(tok, state, ignore=CONSTANT_KEYS, what=f"Cosmos video tokenizer {folder}")
        return tok.to(dtype).eval()

    def save_pretrained(self, folder: str | os.PathLike) -> None:
        """Writes `model.safetensors` and `config.json` (what `from_pretrained` reads back; a
        conversion of the TorchScript files that loads without the pickle reader)."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / "config.json", self.config.to_dict())
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(folder / "model.safetensors"))

    @property
    def codebook_size(self) -> int:
        return self.config.codebook_size

    def indices_to_codes(self, indices: torch.Tensor) -> torch.Tensor:
        """FSQ vectors `[..., 6]` (float, in [-1, 1]) of code `indices [...]`, as the original's
        `FSQuantizer.indices_to_codes` before its channel move."""
        self.check_codes(indices)
        return self.quantizer.code_vectors(indices)

    def code_vectors(self) -> torch.Tensor:
        """Every code's FSQ vector, float `[V, 6]` (`[64000, 6]` for DV8x16x16), for latent
        neighbourhoods (LANTERN, GSD)."""
        return self.quantizer.code_vectors(torch.arange(self.codebook_size))

    def check_codes(self, codes: torch.Tensor) -> None:
        if codes.dtype.is_floating_point or codes.dtype == torch.bool:
            raise ValueError(f"codes must be integers, got {codes.dtype}")
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= self.codebook_size):
            raise ValueError(f"codes must lie in [0, {self.codebook_size}), got [{int(codes.min())}, {int(codes.max())}]")

    def latent_shape(self, frames: int, height: int, width: int) -> tuple[int, int, int]:
        """`(t, h, w)` of the codes of a video of `frames x height x width`."""
        c = self.config
        if frames < 1 or (frames - 1) % c.temporal_compression or height % c.spatial_compression or width % c.spatial_compression:
            raise ValueError(f"a video must have 1 + {c.temporal_compression}k frames and a height and width that are multiples "
                             f"of {c.spatial_compression}, got {frames} x {height} x {width}")
        return 1 + (frames - 1) // c.temporal_compression, height // c.spatial_compression, width // c.spatial_compression

    def latent(self, video: torch.Tensor) -> torch.Tensor:
        """Pre-quantisation latents `[B, 6, t, h, w]` of `video [B, 3, T, H, W]` in [-1, 1]."""
        if video.dim() != 5 or video.shape[1] != self.config.in_channels:
            raise ValueError(f"video must be [B, {self.config.in_channels}, T, H, W], got {tuple(video.shape)}")
        self.latent_shape(*video.shape[2:])
        return self.quant_conv(self.encoder(video.to(self.quant_conv.conv3d.weight)))

    @torch.no_grad()
    def encode(self, video: torch.Tensor) -> torch.Tensor:
        """Codes, long `[B, t, h, w]`, of `video [B, 3, T, H, W]` in [-1, 1] (one causal chunk:
        Cosmos-Predict1 encodes 33 frames at a time)."""
        return self.quantizer.indices(self.latent(video).float())

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Video `[B, 3, 1 + 8(t-1), 16h, 16w]`, about [-1, 1] (not clamped), of codes `[B, t, h, w]`
        (one causal chunk: Cosmos-Predict1 decodes 5 latent frames at a time)."""
        if codes.dim() != 4:
            raise ValueError(f"codes must be [B, t, h, w], got {tuple(codes.shape)}")
        self.check_codes(codes)
        weight = self.post_quant_conv.conv3d.weight
        z = self.quantizer.code_vectors(codes.to(weight.device)).movedim(-1, 1).to(weight.dtype)  # (B, 6, t, h, w)
        return self.decoder(self.post_quant_conv(z))
