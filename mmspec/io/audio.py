"""WAV files with the stdlib `wave` module: 16-bit mono PCM, written atomically to a
checked path.

Example:
    >>> from mmspec.io.audio import write_wav
    >>> write_wav("outputs/seven.wav", out.audios[0], out.sample_rate)  # doctest: +SKIP
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import torch

from mmspec.core.bounds import MAX_AUDIO_BYTES, MAX_AUDIO_SECONDS, check_media_file
from mmspec.io.files import atomic_write, check_writable


def check_wav_path(path: str | Path, overwrite: bool = True) -> Path:
    """`path` as a writable `.wav` file path, or a one-line `ValueError` saying why not."""
    path = Path(path)
    if path.suffix.lower() != ".wav":
        raise ValueError(f"audio path {str(path)!r} must name a .wav file")
    if path.is_dir():
        raise ValueError(f"audio path {str(path)!r} is a folder; give a file path such as {str(path / 'speech.wav')!r}")
    if path.exists() and not overwrite:
        raise ValueError(f"audio path {str(path)!r} exists; pass --overwrite to replace it, or choose another path")
    try:
        check_writable(path.parent)
    except ValueError as err:
        raise ValueError(f"audio path {str(path)!r} cannot be written: {err}") from None
    return path


def write_wav(path: str | Path, audio: torch.Tensor | np.ndarray, sample_rate: int) -> Path:
    """Writes mono `audio [samples]` in [-1, 1] as 16-bit PCM, atomically."""
    path = check_wav_path(path)
    samples = np.asarray(torch.as_tensor(audio).detach().float().cpu().reshape(-1).clamp(-1, 1) * 32767, dtype="<i2")
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        with wave.open(str(tmp), "wb") as f:
            f.setnchannels(1)
            f.setsampwidth(2)
            f.setframerate(int(sample_rate))
            f.writeframes(samples.tobytes())

    atomic_write(path, write)
    return path


def read_wav(path: str | Path) -> tuple[torch.Tensor, int]:
    """A 16-bit mono WAV as float `[samples]` in [-1, 1], and its sample rate; a file past
    `MAX_AUDIO_BYTES` or `MAX_AUDIO_SECONDS` (`mmspec.core.bounds`), or no WAV, is refused
    in one line naming it."""
    path = check_media_file(path, "WAV", MAX_AUDIO_BYTES)
    try:
        with wave.open(str(path), "rb") as f:
            if f.getsampwidth() != 2 or f.getnchannels() != 1:
                raise ValueError(f"{path} is not 16-bit mono PCM")
            seconds = f.getnframes() / max(f.getframerate(), 1)
            if seconds > MAX_AUDIO_SECONDS:
                raise ValueError(f"{path} lasts {seconds:,.0f} s, more than the {MAX_AUDIO_SECONDS:,.0f} s mmspec reads")
            pcm = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
            return torch.from_numpy(pcm.astype(np.float32) / 32768.0), f.getframerate()
    except (wave.Error, EOFError) as err:
        raise ValueError(f"{path} is not a readable WAV file ({err or 'truncated'})") from None


def as_gradio_audio(audio: torch.Tensor, sample_rate: int) -> tuple[int, np.ndarray]:
    """A waveform in [-1, 1] as Gradio's `Audio` takes it: (rate, 16-bit samples)."""
    return sample_rate, (audio.clamp(-1, 1) * 32767).to(torch.int16).numpy()
