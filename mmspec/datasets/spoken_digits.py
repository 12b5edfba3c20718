"""Spoken digits: the ten English digit words, spoken by espeak-ng with random voices.

Each clip draws a voice (an English accent and a voice variant, male or female), a pitch,
a speaking rate and a loudness from `numpy.random.default_rng(SPLIT_SEEDS[split] + i)`,
so clip i of a split never depends on how many are asked for and "train" and "heldout"
never share a draw. espeak-ng's 22.05 kHz output is kept at that rate (resampling
cost more than speaking), its leading silence trimmed to `LEAD_SECONDS`, and the clip cut or zero-padded to
`CLIP_SECONDS` (the longest words at the slowest rate still fit).

Waveforms are float32 `[N, CLIP_SAMPLES]` in [-1, 1]; labels are long `[N]`, balanced
(`label = index % 10`). espeak-ng is a Debian package (`apt-get install espeak-ng`).

Example:
    >>> from mmspec.datasets.spoken_digits import load_split
    >>> audio, labels = load_split("heldout", 12)  # doctest: +SKIP
    >>> audio.shape, labels.tolist()  # doctest: +SKIP
    (torch.Size([12, 16896]), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1])
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import torch

WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
SAMPLE_RATE = 22_050  # espeak-ng's own rate
CLIP_SAMPLES = 48 * 352  # 0.766 s: 48 codec frames of 352 samples
CLIP_SECONDS = CLIP_SAMPLES / SAMPLE_RATE
LEAD_SECONDS = 0.032  # silence kept before the word
SPLIT_SEEDS = {"train": 0, "heldout": 1_000_000}
ACCENTS = ("en-us", "en-gb", "en-gb-scotland", "en-029", "en-gb-x-rp", "en-us-nyc", "en-gb-x-gbclan", "en-gb-x-gbcwmd")
VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5")
PITCH, RATE = (25, 75), (150, 210)  # espeak-ng -p (0-99) and -s (words per minute)


def espeak_binary() -> str:
    path = shutil.which("espeak-ng")
    if path is None:
        raise ValueError("espeak-ng is not installed: apt-get install espeak-ng")
    return path


def speak(word: str, voice: str, pitch: int, rate: int) -> torch.Tensor:
    """espeak-ng's waveform of `word`, float32 `[samples]` at `SAMPLE_RATE`."""
    wav = subprocess.run([espeak_binary(), "-v", voice, "-p", str(pitch), "-s", str(rate), "--stdout", word],
                         capture_output=True, check=True).stdout
    pcm = np.frombuffer(wav[44:], dtype="<i2").astype(np.float32) / 32768.0  # after the 44-byte RIFF header
    return torch.from_numpy(pcm)


def fit_clip(audio: torch.Tensor, threshold: float = 0.01) -> torch.Tensor:
    """`audio` with its leading silence trimmed to `LEAD_SECONDS`, cut or zero-padded to
    `CLIP_SAMPLES`."""
    loud = torch.nonzero(audio.abs() > threshold)
    start = max(int(loud[0]) - int(LEAD_SECONDS * SAMPLE_RATE), 0) if len(loud) else 0
    clip = audio[start : start + CLIP_SAMPLES]
    return torch.nn.functional.pad(clip, (0, CLIP_SAMPLES - len(clip)))


def clip_settings(split: str, index: int) -> dict:
    """The voice, pitch, rate and gain of clip `index` of `split`."""
    rng = np.random.default_rng(SPLIT_SEEDS[split] + index)
    voice = f"{ACCENTS[rng.integers(len(ACCENTS))]}+{VARIANTS[rng.integers(len(VARIANTS))]}"
    return {"voice": voice, "pitch": int(rng.integers(*PITCH)), "rate": int(rng.integers(*RATE)),
            "gain": float(rng.uniform(0.5, 1.0))}


def load_split(split: str, n: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Clips `start .. start + n` of `split`: waveforms `[n, CLIP_SAMPLES]` and labels `[n]`."""
    if split not in SPLIT_SEEDS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLIT_SEEDS)}")
    audio, labels = [], []
    for i in range(start, start + n):
        s = clip_settings(split, i)
        clip = fit_clip(speak(WORDS[i % len(WORDS)], s["voice"], s["pitch"], s["rate"]))
        audio.append(clip / clip.abs().max().clamp_min(1e-6) * s["gain"])
        labels.append(i % len(WORDS))
    return torch.stack(audio), torch.tensor(labels, dtype=torch.long)
