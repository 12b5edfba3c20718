"""Decoding methods on a text-to-speech pipeline: forwards per second of audio and wall time,
each clip timed beside its AR twin.

    PYTHONPATH=. python benchmarks/text_to_speech.py                      # the tiny Orpheus-format fixture
    PYTHONPATH=. python benchmarks/text_to_speech.py --max-new-tokens 700 # its clips as long as real ones (8.5 s)
    PYTHONPATH=. python benchmarks/text_to_speech.py --model dia-tiny     # the tiny Dia fixture
    PYTHONPATH=. python benchmarks/text_to_speech.py --pipeline DIR --voice tara --device cuda --threads 0 \\
        --name orpheus-3b                                                 # a real checkpoint saved as a pipeline

For each (text, seed), every method says the text in turn, AR first, one clip per call
(batch 1), so each method's time sits beside AR's on the same clip. Reports per method:
forward passes per clip and per second of audio, how many times fewer than AR, wall time
(decoding and the codec) and its ratio to AR, and the share of clips whose tokens equal
AR's (1.0 for auto and keyed: the same tokens for the seed). Writes
`benchmarks/results/tts_{name}.{md,json,png}`.

The tiny fixtures are random weights: their forward counts say how the engine handles the
layout (frames, stop tokens, the repetition penalty), not what a trained model accepts.
The fixture's Orpheus Llama has rotary positions, so `--max-new-tokens` past its clips of
six frames only lengthens its position table (`max_position_embeddings`), as a real
Orpheus clip of 1,200 tokens needs.
"""

from __future__ import annotations

import argparse

import torch

from mmspec.decoding.config import DecodingConfig
from mmspec.runs.bench import dated_environment, report, side_by_side

TEXTS = ["Hey there, how are you?", "The quick brown fox.", "It is raining again, sadly.", "Numbers: one, two, three.",
         "Okay, let us go!"]
METHODS = {
    "orpheus": ["ar", "auto", "keyed+previous-frame", "keyed+lookup", "mc-sjd", "mc-sjd+previous-frame", "sjd"],
    "dia": ["ar", "auto", "keyed+previous-step", "mc-sjd", "mc-sjd+previous-step", "sjd"],
}


def load(args):
    """The pipeline under test and its family ("orpheus" or "dia")."""
    if args.pipeline:
        from mmspec.pipelines import load_pipeline

        pipe = load_pipeline(args.pipeline)
    elif args.model == "orpheus-tiny":
        from tests.helpers.orpheus import orpheus_pipeline

        pipe = orpheus_pipeline()
    else:
        from tests.helpers.dia import dia_pipeline

        pipe = dia_pipeline()
    pipe.set_progress_bar_config(disable=True)
    if args.max_new_tokens and args.model == "orpheus-tiny" and not args.pipeline:
        pipe.model.config.max_position_embeddings = max(pipe.context_length, args.max_new_tokens + 64)
        pipe.max_new_tokens = pipe.check_length(args.max_new_tokens)
    return pipe.to(args.device), "dia" if type(pipe).__name__ == "DiaPipeline" else "orpheus"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["orpheus-tiny", "dia-tiny"], default="orpheus-tiny")
    parser.add_argument("--pipeline", help="a saved OrpheusPipeline or DiaPipeline folder instead of a tiny fixture")
    parser.add_argument("--name", help="the results' name (default: the model's)")
    parser.add_argument("--voice", help="the voice of every clip (default: none)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds per text")
    parser.add_argument("--max-new-tokens", type=int, help="the longest clip (default: the pipeline's)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out-dir", default="benchmarks/results")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    pipe, family = load(args)
    methods = [DecodingConfig.from_name(name) for name in METHODS[family]]
    length = {} if args.max_new_tokens is None else {"max_new_tokens": args.max_new_tokens}
    for config in methods:
        pipe.check_decoding(config)
    pipe(TEXTS[0], voice=args.voice, decoding="ar", **length)  # warm-up: first calls allocate and measure auto's cost curve
    pipe(TEXTS[0], voice=args.voice, decoding="auto", **length)
    work = [(text, seed) for text in TEXTS for seed in range(args.seeds)]
    audio_s = [0.0]  # AR's clips, in seconds of audio

    def add_audio(config, out):
        if config.method == "ar":
            audio_s[0] += len(out.audios[0]) / out.sample_rate

    results = side_by_side(methods, len(work), device=args.device, desc="clips", on_output=add_audio,
                           decode=lambda i, config: pipe(work[i][0], voice=args.voice, decoding=config,
                                                         generator=torch.Generator().manual_seed(work[i][1]), **length))
    audio_s = audio_s[0]
    for result in results:
        result.quality["forwards_per_audio_s"] = sum(result.forward_passes) / max(audio_s, 1e-9)
    sampling = {**pipe.default_sampling, **({"repetition_penalty": pipe.repetition_penalty} if family == "orpheus" else {})}
    label = args.name or (args.model if not args.pipeline else args.pipeline)
    label += "" if args.max_new_tokens is None else f", at most {args.max_new_tokens} tokens a clip"
    meta = {
        "description": f"{type(pipe).__name__} ({label}), {len(TEXTS)} texts x {args.seeds} seeds, {audio_s / len(work):.3g} s of "
                       f"audio a clip on average (AR's clips), batch 1, voice {args.voice}, sampling {sampling}; each clip "
                       f"said by every method in turn, AR first. Wall time covers decoding and the codec, torch on "
                       f"{torch.get_num_threads()} thread(s), device {args.device}.",
        **dated_environment(),
    }
    name = args.name or args.model + ("" if args.max_new_tokens is None else f"-{args.max_new_tokens}")
    for path in report(results, args.out_dir, f"tts_{name.replace('/', '_')}", meta, sample="clip"):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
