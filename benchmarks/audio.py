"""Decoding methods on the shipped speech model: forwards per second of audio, wall time and
word accuracy, side by side.

    PYTHONPATH=. python benchmarks/audio.py                 # ~10 min on 1 CPU thread
    PYTHONPATH=. python benchmarks/audio.py --per-word 2    # a quick look

Each method says the same (word, seed) list, one clip per call (batch 1: the latency a
user sees), with torch on one CPU thread. Reports per method: forward passes per clip and
per second of audio, how many times fewer than AR, wall time (decoding and Griffin-Lim)
and its ratio to AR, and word accuracy by the shipped classifier with its binomial
standard error. Writes `benchmarks/results/audio.{md,json,png}`, and a sheet of log-mel
spectrograms (`--spectrograms`): per word, a real held-out espeak-ng clip, then AR's and
MC-SJD-with-copy-drafts' first clip.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from tqdm import tqdm

from mmspec.assets import SPEECH_ASSETS
from mmspec.io.files import atomic_write
from mmspec.runs.bench import MethodResult, environment, report
from mmspec.datasets.spoken_digits import load_split
from mmspec.io.images import commit_heatmap, image_grid, label_rows
from mmspec.decoding.config import DecodingConfig
from mmspec.pipelines.audio import SpeechPipeline

METHODS = [
    DecodingConfig.from_name("ar"),
    DecodingConfig.from_name("sjd"),
    DecodingConfig.from_name("mc-sjd"),
    DecodingConfig.from_name("mc-sjd", init="previous-step"),  # copy drafts along time
    DecodingConfig.from_name("mc-sjd", init="previous-step", branches=4),  # and candidate steps under tree attention
    DecodingConfig.from_name("mc-sjd", init="previous-step", step_test="joint"),  # each frame tested as one token
    DecodingConfig.from_name("mc-sjd+pcg", init="previous-step"),  # 32 groups of the 64 codes
    DecodingConfig.from_name("mc-sjd+pcg", init="previous-step", pcg_groups=8),  # coarser groups: more relaxed
]


def run_method(pipe: SpeechPipeline, words: list[str], config: DecodingConfig, seed: int, on_clip,
               sampling: dict | None = None) -> MethodResult:
    """Says `words[i]` with seed `seed + i`, one clip per call, with `sampling` over the
    defaults; the clips, forwards and time."""
    clips, forwards = [], []
    start = time.perf_counter()
    for i, word in enumerate(words):
        out = pipe(word, decoding=config, generator=torch.Generator().manual_seed(seed + i), **(sampling or {}))
        clips.append(out.audios)
        forwards.append(out.stats[0].forward_passes)
        on_clip()
    return MethodResult(config.describe(), config.exact, torch.cat(clips), forwards, time.perf_counter() - start)


@torch.no_grad()
def word_accuracy(pipe: SpeechPipeline, clips: torch.Tensor, words: list[str]) -> tuple[float, float]:
    """The classifier's accuracy on `clips` against the asked `words`, and its standard error."""
    labels = torch.tensor([pipe.words.index(w) for w in words])
    acc = float((pipe.classifier.predict(clips) == labels).float().mean())
    return acc, math.sqrt(max(acc * (1 - acc), 1e-12) / len(words))


def spectrogram(pipe: SpeechPipeline, clip: torch.Tensor, size: int = 160):
    """A clip's log-mel spectrogram (the codec's bins, low frequencies at the bottom) as a picture."""
    log_mel = pipe.codec.log_mel(clip[None])[0].T.flip(0)  # [n_mels, frames]
    return commit_heatmap(log_mel.flatten(), tuple(log_mel.shape), size=size)


def spectrogram_sheet(pipe: SpeechPipeline, results: list[MethodResult], per_word: int, path: Path) -> None:
    """One row per word: a real held-out espeak-ng clip, then the first clip of each result."""
    real, _ = load_split("heldout", len(pipe.words))
    tiles = []
    for i, word in enumerate(pipe.words):
        tiles += [spectrogram(pipe, real[i]), *(spectrogram(pipe, r.images[i * per_word]) for r in results)]
    sheet = label_rows(image_grid(tiles, cols=1 + len(results)), list(pipe.words))
    atomic_write(path, lambda p: sheet.save(p, format="PNG"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default=str(SPEECH_ASSETS), help="a saved speech pipeline (default: the shipped one)")
    parser.add_argument("--per-word", type=int, default=10, help="clips per word (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--temperature", type=float, help="sampling temperature (default: the pipeline's)")
    parser.add_argument("--top-k", type=int, help="sampling top-k (default: the pipeline's)")
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    parser.add_argument("--spectrograms", default="docs/audio-spectrograms.png",
                        help="where the sheet of real and generated spectrograms goes (default docs/audio-spectrograms.png)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    pipe = SpeechPipeline.from_pretrained(args.pipeline)
    pipe.set_progress_bar_config(disable=True)
    words = [w for w in pipe.words for _ in range(args.per_word)]
    clip_s = pipe.max_duration_s
    bar = tqdm(total=len(METHODS) * len(words), desc="benchmark", unit="clip")
    sampling = {k: v for k, v in (("temperature", args.temperature), ("top_k", args.top_k)) if v is not None}
    results = []
    for config in METHODS:
        result = run_method(pipe, words, config, args.seed, lambda: bar.update(1), sampling)
        acc, err = word_accuracy(pipe, result.images, words)
        result.quality = {"forwards_per_audio_s": result.mean_forwards / clip_s, "word_accuracy": acc, "word_accuracy_se": err}
        results.append(result)
        bar.set_postfix(method=result.method, acc=f"{acc:.2f}")
    bar.close()
    shown = "Shipped speech (mmspec/assets/speech)" if Path(args.pipeline) == SPEECH_ASSETS else f"Speech ({args.pipeline})"
    meta = {
        "description": (
            f"{shown} model, {args.per_word} clips x {len(pipe.words)} words per method, "
            f"{clip_s:.3f} s each ({pipe.steps_for(None)} decoder steps of {pipe.codebooks} codebooks), batch 1, "
            f"sampling {pipe.default_sampling | sampling}. Window 16; random first drafts unless init= says otherwise "
            f"(previous-step: copy each codebook's token from the step before); branches=4: beside each of the 4 leading "
            f"drafts, the draft with one codebook's token swapped for one of its 4 likeliest others, and 3 neighbouring "
            f"steps, each followed by 2 drafts, under tree attention (after a rejection that no candidate matches, the next "
            f"drafts follow the candidate nearest the drawn step); exact methods test a step's codebooks one by one unless "
            f"a joint test is named (the frame as one token of V^K, `mmspec.kernels.verify_joint`); pcg groups as `PCGRule`'s defaults. "
            f"Forwards include the prefill; wall time covers decoding and Griffin-Lim, torch on {args.threads} CPU thread(s)."
        ),
        "seed": args.seed,
        "per_word": args.per_word,
        "date": time.strftime("%Y-%m-%d"),
        **environment(),
    }
    md, js, png = report(results, Path(args.out), "audio", meta, sample="clip")
    print(md.read_text())
    spectrogram_sheet(pipe, [results[0], results[3]], args.per_word, Path(args.spectrograms))
    print(f"wrote {md}, {js}, {png} and {args.spectrograms} (columns: real, {results[0].method}, {results[3].method})")


if __name__ == "__main__":
    main()
