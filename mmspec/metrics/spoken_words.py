"""A log-mel CNN that names the spoken digit of a clip: the judge of generated speech.

Trained by `scripts/train_speech_model.py` on real espeak-ng clips
(`mmspec.datasets.spoken_digits`), never on codec output, and shipped in
`mmspec/assets/speech/classifier/`. Its log-mel front end is its own (64 bins, per-clip
mean removed, so loudness does not matter), independent of the codec's.

Example:
    >>> import torch
    >>> from mmspec.metrics.spoken_words import WordClassifier, WordClassifierConfig
    >>> clf = WordClassifier(WordClassifierConfig()).eval()
    >>> clf(torch.zeros(2, 16896)).shape
    torch.Size([2, 10])
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torchaudio.transforms as T
from torch import nn

from mmspec.utils.checkpoint import FromCheckpoint, JSONConfig
from mmspec.metrics.classifier import conv_stages


@dataclass
class WordClassifierConfig(JSONConfig):
    config_name = "word classifier config"

    num_classes: int = 10
    sample_rate: int = 22_050
    n_mels: int = 64
    hop_length: int = 256
    widths: list[int] = field(default_factory=lambda: [16, 32, 64])


class WordClassifier(FromCheckpoint, nn.Module):
    """Log-mel `[1, n_mels, frames]` -> stages of (3x3 conv, stride-2 3x3 conv) with batch
    norm -> global average pool -> linear. Use it in eval mode."""

    checkpoint_name = "word classifier checkpoint"

    def __init__(self, config: WordClassifierConfig):
        super().__init__()
        self.config = c = config
        self.mel = T.MelSpectrogram(c.sample_rate, n_fft=1024, hop_length=c.hop_length, n_mels=c.n_mels, f_max=8000.0)
        self.body = conv_stages(1, c.widths)
        self.head = nn.Linear(c.widths[-1], c.num_classes)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """Word logits `[B, num_classes]` of waveforms `[B, samples]` at `sample_rate`."""
        if audio.dim() != 2:
            raise ValueError(f"audio must be [batch, samples], got {tuple(audio.shape)}")
        x = torch.log(self.mel(audio.to(self.head.weight)) + 1e-5)
        x = x - x.mean(dim=(1, 2), keepdim=True)
        return self.head(self.body(x[:, None]).mean(dim=(2, 3)))

    @torch.no_grad()
    def predict(self, audio: torch.Tensor) -> torch.Tensor:
        """Predicted word ids `[B]`."""
        return self(audio).argmax(-1)
