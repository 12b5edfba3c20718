"""A residual-VQ codec of log-mel frames, trained by residual k-means, inverted on CPU.

Encoding: a waveform's log-mel frames (normalised per mel bin) are quantised by K
codebooks in turn, each coding what the ones before it left (residual VQ); frame f of
codebook k is one of `codebook_size` ids. Decoding: the summed code vectors, back to mel
power, to a linear spectrogram by torchaudio's `InverseMelScale` (least squares), to a
waveform by `GriffinLim`. Nothing here needs a GPU or a learned decoder, which is why a
codec of this kind can be trained in seconds here; the price is Griffin-Lim's phase
(a buzzy timbre), which leaves words intelligible.

Example:
    >>> codec = MelCodec.fit(waveforms, MelCodecConfig(), torch.Generator().manual_seed(0))  # doctest: +SKIP
    >>> codes = codec.encode(waveforms)    # long [B, K, frames]  # doctest: +SKIP
    >>> audio = codec.decode(codes)        # float [B, frames * hop_length]  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torchaudio.functional as AF
import torchaudio.transforms as T
from safetensors.torch import load_file, save_file
from torch import nn

from mmspec.utils.checkpoint import JSONConfig

LOG_FLOOR = 1e-5  # added to mel power before the log: silence sits at log(1e-5)


@dataclass
class MelCodecConfig(JSONConfig):
    config_name = "mel codec config"

    sample_rate: int = 22_050
    n_fft: int = 1024
    hop_length: int = 352
    n_mels: int = 48
    f_max: float = 8000.0
    codebooks: int = 4
    codebook_size: int = 64
    kmeans_iters: int = 25
    griffin_lim_iters: int = 48

    def weight_count(self) -> int:
        """Values a `MelCodec` of this config holds: the codebooks, the normalisation, the
        mel filterbank and its inverse, the window."""
        bins = self.n_fft // 2 + 1
        return self.codebooks * self.codebook_size * self.n_mels + 2 * self.n_mels + 2 * bins * self.n_mels + self.n_fft


def kmeans(x: torch.Tensor, k: int, iters: int, generator: torch.Generator) -> torch.Tensor:
    """`k` centroids of the rows of `x [N, D]` (Lloyd's algorithm from k random rows; an
    empty cluster takes a random row)."""
    centroids = x[torch.randperm(len(x), generator=generator)[:k]].clone()
    for _ in range(iters):
        assign = torch.cdist(x, centroids).argmin(1)
        sums = torch.zeros_like(centroids).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=k)
        empty = counts == 0
        centroids = torch.where(empty[:, None], x[torch.randint(len(x), (k,), generator=generator)],
                                sums / counts.clamp_min(1)[:, None])
    return centroids


class MelCodec(nn.Module):
    """Residual VQ of normalised log-mel frames; `codebook` `[K, V, n_mels]`."""

    def __init__(self, config: MelCodecConfig):
        super().__init__()
        c = self.config = config
        self.register_buffer("mean", torch.zeros(c.n_mels))
        self.register_buffer("std", torch.ones(c.n_mels))
        self.register_buffer("codebook", torch.zeros(c.codebooks, c.codebook_size, c.n_mels))
        self.mel = T.MelSpectrogram(c.sample_rate, n_fft=c.n_fft, hop_length=c.hop_length, n_mels=c.n_mels, f_max=c.f_max,
                                    power=2.0)
        self.inverse_mel = T.InverseMelScale(c.n_fft // 2 + 1, c.n_mels, c.sample_rate, f_max=c.f_max)
        self.register_buffer("window", torch.hann_window(c.n_fft), persistent=False)

    @property
    def frame_rate(self) -> float:
        return self.config.sample_rate / self.config.hop_length

    def log_mel(self, audio: torch.Tensor) -> torch.Tensor:
        """`audio [B, samples]` -> log-mel `[B, samples // hop_length, n_mels]` (the frame
        centred past the end is dropped)."""
        frames = audio.shape[-1] // self.config.hop_length
        return torch.log(self.mel(audio.float()) + LOG_FLOOR)[..., :frames].transpose(1, 2)

    def quantize(self, features: torch.Tensor) -> torch.Tensor:
        """Normalised frames `[B, F, n_mels]` -> codes `[B, K, F]`."""
        residual, codes = features, []
        for book in self.codebook:
            ids = torch.cdist(residual, book[None].expand(len(residual), -1, -1)).argmin(-1)
            residual = residual - book[ids]
            codes.append(ids)
        return torch.stack(codes, 1)

    def dequantize(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes `[B, K, F]` -> normalised frames `[B, F, n_mels]`."""
        return sum(self.codebook[k][codes[:, k]] for k in range(codes.shape[1]))

    @torch.no_grad()
    def encode(self, audio: torch.Tensor) -> torch.Tensor:
        """Waveforms `[B, samples]` at `sample_rate` -> long codes `[B, K, samples // hop_length]`."""
        return self.quantize((self.log_mel(audio) - self.mean) / self.std)

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Long codes `[B, K, F]` -> waveforms `[B, F * hop_length]`, peak-normalised to 0.9."""
        self.check_codes(codes)
        log_mel = self.dequantize(codes) * self.std + self.mean
        power = (log_mel.exp() - LOG_FLOOR).clamp_min(0).transpose(1, 2)  # [B, n_mels, F]
        power = nn.functional.pad(power, (0, 1))  # the silent frame centred at the end, which `log_mel` dropped
        c = self.config
        # phases start at zero (rand_init=False): decoding draws nothing at random
        audio = AF.griffinlim(self.inverse_mel(power), self.window, c.n_fft, c.hop_length, c.n_fft, 2.0, c.griffin_lim_iters,
                              0.99, codes.shape[-1] * c.hop_length, rand_init=False)
        return 0.9 * audio / audio.abs().amax(-1, keepdim=True).clamp_min(1e-6)

    def check_codes(self, codes: torch.Tensor) -> None:
        c = self.config
        if codes.dim() != 3 or codes.shape[1] != c.codebooks or codes.dtype.is_floating_point:
            raise ValueError(f"codes must be integer [batch, {c.codebooks} codebooks, frames], got {tuple(codes.shape)} {codes.dtype}")
        if codes.numel() and (codes.min() < 0 or codes.max() >= c.codebook_size):
            raise ValueError(f"codes must lie in [0, {c.codebook_size}), got {int(codes.min())} to {int(codes.max())}")

    @classmethod
    @torch.no_grad()
    def fit(cls, audio: torch.Tensor, config: MelCodecConfig, generator: torch.Generator, max_frames: int = 100_000) -> "MelCodec":
        """A codec whose normalisation and codebooks are fitted to `audio [N, samples]`, on
        up to `max_frames` random frames: codebook k is k-means of what codebooks < k leave."""
        codec = cls(config)
        frames = codec.log_mel(audio).flatten(0, 1)
        frames = frames[torch.randperm(len(frames), generator=generator)[:max_frames]]
        codec.mean.copy_(frames.mean(0))
        codec.std.copy_(frames.std(0).clamp_min(1e-3))
        residual = (frames - codec.mean) / codec.std
        for k in range(config.codebooks):
            codec.codebook[k] = kmeans(residual, config.codebook_size, config.kmeans_iters, generator)
            residual = residual - codec.codebook[k][torch.cdist(residual, codec.codebook[k]).argmin(1)]
        return codec

    def save_pretrained(self, folder: str | Path) -> None:
        from mmspec.utils.json_files import write_json

        folder = Path(folder)
        write_json(folder / "config.json", self.config.to_dict())
        save_file({k: getattr(self, k).contiguous() for k in ("mean", "std", "codebook")}, str(folder / "model.safetensors"))

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> "MelCodec":
        from mmspec.utils.json_files import read_json

        folder = Path(folder)
        config = MelCodecConfig.from_dict(read_json(folder / "config.json", "mel codec"))
        config.check_size()  # before the codebooks are allocated
        codec = cls(config)
        state = load_file(str(folder / "model.safetensors"))
        if set(state) != {"mean", "std", "codebook"} or state["codebook"].shape != codec.codebook.shape:
            raise ValueError(f"{folder} does not hold a mel codec of this config's shape")
        for name, value in state.items():
            getattr(codec, name).copy_(value)
        return codec
