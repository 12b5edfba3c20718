"""Audio files and runs of the speech pipeline: WAV writing (the stdlib `wave` module,
16-bit PCM), a checked output path, and resumable batches (one WAV per line of a words
file, a record per clip, as `mmspec.batch` does for images).

Example:
    >>> from mmspec.audio import write_wav
    >>> write_wav("outputs/seven.wav", out.audios[0], out.sample_rate)  # doctest: +SKIP
"""

from __future__ import annotations

import time
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from mmspec.batch import Item, start_run
from mmspec.runs.paths import atomic_write, check_writable

AUDIO = "audio/{id}.wav"


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
    """A 16-bit mono WAV as float `[samples]` in [-1, 1], and its sample rate."""
    with wave.open(str(path), "rb") as f:
        if f.getsampwidth() != 2 or f.getnchannels() != 1:
            raise ValueError(f"{path} is not 16-bit mono PCM")
        pcm = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
        return torch.from_numpy(pcm.astype(np.float32) / 32768.0), f.getframerate()


def run_audio_batch(
    pipe,
    items: list[Item],
    out_dir: str | Path,
    *,
    decoding="auto",
    seed: int = 0,
    call_kwargs: dict | None = None,
    pipeline: str | None = None,
    restart: bool = False,
    on_item: Callable[[Item, bool], None] | None = None,
) -> list[Item]:
    """Says each item's word into `out_dir/audio/{id}.wav` with a record
    `out_dir/records/{id}.json`; items already recorded are skipped, so a rerun resumes.
    The run keeps `mmspec.runs.runner`'s contract: a folder holding a run with other
    settings, or an id recorded for another word, is refused before any work; `restart`
    deletes the earlier run's results first. Returns the items generated (not skipped)."""
    out_dir = Path(out_dir)
    for item in items:
        pipe.condition.word_ids([item.prompt.strip().lower()])  # an unknown word fails before any work
    run, decoding, call_kwargs = start_run(pipe, items, out_dir, decoding, seed, call_kwargs, pipeline, (AUDIO,), restart)
    tasks = {task.id: task for task in run.todo()}
    done = []
    for item in items:
        task = tasks.get(item.id)
        if task is None:
            if on_item:
                on_item(item, True)
            continue
        start = time.perf_counter()
        out = pipe(item.prompt, decoding=decoding, generator=torch.Generator().manual_seed(task.seed), **call_kwargs)
        wav_path = write_wav(run.path(task, AUDIO), out.audios[0], out.sample_rate)
        run.write_record(task, {"decoding": decoding.describe(), "file": str(wav_path.relative_to(out_dir)),
                                "stats": out.stats[0].to_dict(), "seconds": time.perf_counter() - start})
        done.append(item)
        if on_item:
            on_item(item, False)
    return done


def speak_command(args) -> None:
    """`mmspec speak`: words said one after another into one WAV (`--out`), or a words file
    (`--prompts`, one word per line) into a resumable batch folder (`--out-dir`)."""
    from mmspec.batch import read_items, write_manifest
    from mmspec.cli import decoding_configs, load, sampling_kwargs

    if bool(args.words) == bool(args.prompts):
        raise ValueError("give words to say (mmspec speak seven three --out ...) or --prompts FILE, not both or neither")
    if args.restart and not args.prompts:
        raise ValueError("--restart clears a batch folder: give it with --prompts and --out-dir")
    if args.words:
        check_wav_path(args.out, args.overwrite)
    else:
        check_writable(Path(args.out_dir))
    [config] = decoding_configs(args)
    sampling = sampling_kwargs(args)
    pipe = load(args)
    if not hasattr(pipe, "words"):
        raise ValueError(f"{args.pipeline} holds a {type(pipe).__name__}, not a speech pipeline")
    config = pipe.check_decoding(config, pipe.steps_for(args.duration))
    if args.prompts:
        items = read_items(args.prompts, None)
        if args.duration is not None:
            sampling["duration_s"] = args.duration
        done = run_audio_batch(pipe, items, args.out_dir, decoding=config, seed=args.seed, call_kwargs=sampling,
                               pipeline=str(Path(args.pipeline).resolve()), restart=args.restart)
        print(f"wrote {len(done)} clips ({len(items) - len(done)} already done); manifest: {write_manifest(args.out_dir, items)}")
        return
    out = pipe(list(args.words), decoding=config, duration_s=args.duration, generator=torch.Generator().manual_seed(args.seed),
               **sampling)
    write_wav(args.out, out.audios.reshape(-1), out.sample_rate)
    forwards = [s.forward_passes for s in out.stats]
    print(f"wrote {args.out} ({', '.join(args.words)}; {out.audios.shape[-1] * len(forwards) / out.sample_rate:.2f} s)")
    print(f"decoding: {config.describe()} ({'exact' if all(s.exact for s in out.stats) else 'relaxed'}): "
          f"{sum(forwards) / len(forwards):.1f} forward passes per word (AR needs {out.tokens.shape[1]}), "
          f"{out.stats[0].wall_time_s:.2f} s")
