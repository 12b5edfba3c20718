"""The decoder of Chameleon's image tokenizer (Meta's VQGAN, Gafni et al. 2022), which
Lumina-mGPT and Anole generate codes for; checkpoint-compatible with Meta's `vqgan.ckpt`.

transformers' `ChameleonVQVAE` has the encoder and quantiser only. This is the other half,
with the module names of Meta's taming-style `VQModel` (`chameleon/inference/vqgan.py`,
copied in Lumina-mGPT's `model/chameleon_vae_ori/vqgan.py`), so the checkpoint's keys load
as they are: the codebook `quantize.embedding`, `post_quant_conv`, and `decoder.*` (a 3x3
conv in, a middle of two residual blocks around self-attention, `num_res_blocks + 1`
residual blocks per level from the coarsest up, each level but the finest ending in a
nearest x2 upsampling and a 3x3 conv, then GroupNorm(32), swish and a 3x3 conv out). The
blocks are LlamaGen's VQ blocks (`mmspec.tokenizers.llamagen_vq`): both come from taming.

`vqgan.yaml` is read with `yaml.safe_load` (its `model.params`: `n_embed`, `embed_dim`,
`ddconfig`) and `vqgan.ckpt` with `torch.load(weights_only=True)` (its `state_dict`; the
encoder's and the training loss's keys are skipped). Images are float `[B, 3, H, W]` in
[-1, 1]; codes are long `[B, h, w]` (16 pixels each side with the shipped `ch_mult`).

Example:
    >>> import torch
    >>> from mmspec.tokenizers.chameleon_vqgan import VQGANConfig, ChameleonVQGANDecoder
    >>> vq = ChameleonVQGANDecoder(VQGANConfig(n_embed=16, embed_dim=4, z_channels=8, ch=32, ch_mult=[1, 1], num_res_blocks=1)).eval()
    >>> vq.decode(torch.zeros(1, 2, 3, dtype=torch.long)).shape
    torch.Size([1, 3, 4, 6])
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from mmspec.tokenizers.llamagen_vq import AttnBlock, ResnetBlock, Upsample, group_norm, run_level, swish
from mmspec.utils.checkpoint import DeviceDtypeMixin, JSONConfig, load_into, read_state_dict

WEIGHTS_NAME, CONFIG_NAME = "model.safetensors", "config.json"


@dataclass
class VQGANConfig(JSONConfig):
    """The `model.params` of Meta's `vqgan.yaml` that the decoder uses (defaults: Chameleon's)."""

    config_name = "VQGAN config"

    n_embed: int = 8192  # codebook size
    embed_dim: int = 256  # codebook vector size
    z_channels: int = 256
    ch: int = 128  # base width
    ch_mult: list[int] = field(default_factory=lambda: [1, 1, 2, 2, 4])
    num_res_blocks: int = 2
    attn_resolutions: list[int] = field(default_factory=list)  # resolutions (of `resolution`) with attention
    resolution: int = 512  # the training image size: only places `attn_resolutions`
    out_ch: int = 3

    def __post_init__(self):
        widths = [self.ch * m for m in self.ch_mult]
        if not self.ch_mult or any(w <= 0 or w % 32 for w in widths):
            raise ValueError(f"VQGAN widths ch * ch_mult = {widths} must be positive multiples of 32 (GroupNorm(32))")
        if min(self.n_embed, self.embed_dim, self.z_channels, self.num_res_blocks + 1) < 1:
            raise ValueError("VQGAN n_embed, embed_dim and z_channels must be positive, num_res_blocks >= 0")

    @property
    def downsample(self) -> int:
        """Pixels per code along each side."""
        return 2 ** (len(self.ch_mult) - 1)

    @classmethod
    def from_yaml(cls, path) -> "VQGANConfig":
        """Reads Meta's `vqgan.yaml` (safe_load: no code runs)."""
        import yaml

        path = os.fspath(path)
        if not os.path.isfile(path):
            raise ValueError(f"VQGAN config {path!r} does not exist; Chameleon's VQGAN comes as vqgan.yaml + vqgan.ckpt")
        try:
            with open(path) as f:
                doc = yaml.safe_load(f)
        except yaml.YAMLError as err:  # python tags and the like are refused by safe_load
            raise ValueError(f"{path} is not a plain VQGAN yaml ({str(err).splitlines()[0]})") from None
        params = (doc or {}).get("model", {}).get("params") if isinstance(doc, dict) else None
        if not isinstance(params, dict) or not isinstance(params.get("ddconfig"), dict):
            raise ValueError(f"{path} is not a VQGAN yaml: it has no model.params.ddconfig")
        dd = params["ddconfig"]
        keys = ("z_channels", "ch", "ch_mult", "num_res_blocks", "attn_resolutions", "resolution", "out_ch")
        values = {k: dd[k] for k in keys if k in dd}
        values.update({k: params[k] for k in ("n_embed", "embed_dim") if k in params})
        if "ch_mult" in values:
            values["ch_mult"] = list(values["ch_mult"])
        if "attn_resolutions" in values:
            values["attn_resolutions"] = list(values["attn_resolutions"] or [])
        return cls.from_dict(values)


class Decoder(nn.Module):
    """Meta's `Decoder` (levels indexed finest first, run coarsest first)."""

    def __init__(self, c: VQGANConfig):
        super().__init__()
        levels = len(c.ch_mult)
        width = c.ch * c.ch_mult[-1]
        res = c.resolution // 2 ** (levels - 1)
        self.conv_in = nn.Conv2d(c.z_channels, width, 3, padding=1)
        self.mid = nn.Module()
        self.mid.block_1, self.mid.attn_1, self.mid.block_2 = ResnetBlock(width, width), AttnBlock(width), ResnetBlock(width, width)
        up = []
        for level in reversed(range(levels)):
            stage = nn.Module()
            out = c.ch * c.ch_mult[level]
            blocks, attns = [], []
            for _ in range(c.num_res_blocks + 1):
                blocks.append(ResnetBlock(width, out))
                width = out
                if res in c.attn_resolutions:
                    attns.append(AttnBlock(width))
            stage.block, stage.attn = nn.ModuleList(blocks), nn.ModuleList(attns)
            if level != 0:
                stage.upsample = Upsample(width)
                res *= 2
            up.insert(0, stage)
        self.up = nn.ModuleList(up)
        self.norm_out = group_norm(width)
        self.conv_out = nn.Conv2d(width, c.out_ch, 3, padding=1)

    def forward(self, z):
        h = self.mid.block_2(self.mid.attn_1(self.mid.block_1(self.conv_in(z))))
        for level in reversed(range(len(self.up))):
            stage = self.up[level]
            h = run_level(h, stage.block, stage.attn)
            if hasattr(stage, "upsample"):
                h = stage.upsample(h)
        return self.conv_out(swish(self.norm_out(h)))


class ChameleonVQGANDecoder(DeviceDtypeMixin, nn.Module):
    """Codes -> pixels with Chameleon's VQGAN: codebook lookup, `post_quant_conv`, `decoder`."""

    def __init__(self, config: VQGANConfig):
        super().__init__()
        self.config = config
        self.quantize = nn.Module()
        self.quantize.embedding = nn.Embedding(config.n_embed, config.embed_dim)
        self.post_quant_conv = nn.Conv2d(config.embed_dim, config.z_channels, 1)
        self.decoder = Decoder(config)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes `[B, h, w]` -> images `[B, 3, h * s, w * s]` (s = `config.downsample`), about [-1, 1]."""
        if codes.dim() != 3:
            raise ValueError(f"codes must be [B, h, w], got {tuple(codes.shape)}")
        if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= self.config.n_embed):
            raise ValueError(f"codes must lie in [0, {self.config.n_embed}), got [{int(codes.min())}, {int(codes.max())}]")
        z = self.quantize.embedding(codes.to(self.device)).permute(0, 3, 1, 2)  # (B, E, h, w)
        return self.decoder(self.post_quant_conv(z.to(self.dtype)))

    @classmethod
    def from_checkpoint(cls, config_path, checkpoint_path) -> "ChameleonVQGANDecoder":
        """Meta's `vqgan.yaml` and `vqgan.ckpt` (or a safetensors file of the same keys).

        Example:
            >>> vq = ChameleonVQGANDecoder.from_checkpoint("tokenizer/vqgan.yaml", "tokenizer/vqgan.ckpt")  # doctest: +SKIP
        """
        config = VQGANConfig.from_yaml(config_path)
        state = read_state_dict(checkpoint_path, None)
        kept = {k: v for k, v in state.items() if k.startswith(("decoder.", "post_quant_conv.", "quantize.embedding."))}
        model = cls(config)
        load_into(model, kept, what=f"VQGAN checkpoint {os.fspath(checkpoint_path)}")
        return model.eval()

    def save_pretrained(self, directory) -> None:
        """`config.json` and `model.safetensors` in `directory`."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CONFIG_NAME).write_text(json.dumps(self.config.to_dict(), indent=1))
        save_file({k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}, directory / WEIGHTS_NAME)

    @classmethod
    def from_pretrained(cls, directory) -> "ChameleonVQGANDecoder":
        directory = Path(directory)
        if not (directory / CONFIG_NAME).is_file() or not (directory / WEIGHTS_NAME).is_file():
            raise ValueError(f"{str(directory)!r} holds no saved VQGAN ({CONFIG_NAME} + {WEIGHTS_NAME})")
        config = VQGANConfig.from_dict(json.loads((directory / CONFIG_NAME).read_text()))
        model = cls(config)
        load_into(model, read_state_dict(directory / WEIGHTS_NAME), what=f"VQGAN weights in {str(directory)!r}")
        return model.eval()
