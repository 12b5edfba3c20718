"""`mmspec speak`: one WAV of a speech pipeline, or a resumable batch (one WAV per line
of a words or texts file, a record per clip, as `mmspec.runs.batch` does for images).

Two kinds of speech pipeline: the shipped digit model (`SpeechPipeline`: words from its
list, `--duration`), and text-to-speech models (`OrpheusPipeline`, `DiaPipeline`: any text,
`--voice`, `--max-new-tokens`; a clip ends at the model's stop token)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import torch

from mmspec.assets import SPEECH_ASSETS
from mmspec.commands.common import (
    add_decoding,
    add_method,
    add_pipeline,
    decoding_configs,
    load,
    positive_int,
    recorded_pipeline,
    sampling_kwargs,
)
from mmspec.io.audio import check_wav_path, write_wav
from mmspec.io.files import check_writable
from mmspec.runs.batch import Item, decode_items, start_run
from mmspec.runs.placement import describe_placement

AUDIO = "audio/{id}.wav"
DEFAULT_WAV = "outputs/speech.wav"
DEFAULT_BATCH_DIR = "outputs/speech-batch"
# what speak takes, in its --help: the image-only names (zipar, lpd-*, left/above) are refused by every speech pipeline
DECODING_HELP = ("decoding method: auto (default; hardware-aware, exact), ar, keyed, sjd or mc-sjd, each optionally +lookup, "
                 "or prompt-lookup; the speech model also takes a relaxed acceptance rule: +pcg, +gsd or +lantern "
                 "(mc-sjd+pcg, sjd+gsd, ...); text-to-speech pipelines (Orpheus, Dia) take exact methods only")
INIT_HELP = ("first drafts: random (default; auto: chosen), previous-step (each codebook's token of the step before; the speech "
             "model), lookup, or several joined by + (previous-step+lookup); Orpheus also takes previous-frame")


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
    """Says each item's word (or text, for a text-to-speech pipeline) into
    `out_dir/audio/{id}.wav` with a record `out_dir/records/{id}.json`; items already
    recorded are skipped, so a rerun resumes.
    The run keeps `mmspec.runs.runner`'s contract: a folder holding a run with other
    settings, or an id recorded for another word, is refused before any work; `restart`
    deletes the earlier run's results first. Returns the items generated (not skipped)."""
    out_dir = Path(out_dir)
    for item in items:  # an unknown word, an empty text or one past the context fails before any work
        if getattr(pipe, "speaks_text", False):
            pipe.check_text(item.prompt, (call_kwargs or {}).get("voice"), (call_kwargs or {}).get("max_new_tokens"))
        else:
            pipe.condition.word_ids([item.prompt.strip().lower()])
    run, decoding, call_kwargs = start_run(pipe, items, out_dir, decoding, seed, call_kwargs, pipeline, (AUDIO,), restart)

    def generate(item: Item, task, generator: torch.Generator) -> tuple[Path, object]:
        out = pipe(item.prompt, decoding=decoding, generator=generator, **call_kwargs)
        return write_wav(run.path(task, AUDIO), out.audios[0], out.sample_rate), out.stats[0]

    return decode_items(run, run.items, items, decoding, generate, on_item)


def speak_text(pipe, args, config, sampling: dict) -> None:
    """`mmspec speak` with a text-to-speech pipeline: the words joined into one text."""
    if args.duration is not None:
        raise ValueError("--duration sets the digit model's clip length; a text-to-speech clip ends at the model's stop token "
                         "(cap it with --max-new-tokens)")
    call = dict(sampling, voice=args.voice, **({} if args.max_new_tokens is None else {"max_new_tokens": args.max_new_tokens}))
    config = pipe.check_decoding(config)
    if args.prompts:
        from mmspec.runs.batch import read_items, write_manifest

        items = read_items(args.prompts, None)
        done = run_audio_batch(pipe, items, args.out_dir, decoding=config, seed=args.seed, call_kwargs=call,
                               pipeline=recorded_pipeline(args.pipeline), restart=args.restart)
        print(f"wrote {len(done)} clips ({len(items) - len(done)} already done) {describe_placement(pipe)}; "
              f"manifest: {write_manifest(args.out_dir, items)}")
        return
    text = " ".join(args.words)
    pipe.check_text(text, args.voice, args.max_new_tokens)
    out = pipe(text, decoding=config, generator=torch.Generator().manual_seed(args.seed), **call)
    write_wav(args.out, out.audios[0], out.sample_rate)
    stats, seconds = out.stats[0], len(out.audios[0]) / out.sample_rate
    print(f"wrote {args.out} ({seconds:.2f} s{'' if args.voice is None else ', voice ' + args.voice})")
    print(f"decoding: {config.describe()} ({'exact' if stats.exact else 'relaxed'}): {stats.forward_passes} forward passes "
          f"for {int(stats.lengths[0])} steps (AR needs one a step), {stats.wall_time_s:.2f} s {describe_placement(pipe)}")


def speak_command(args) -> None:
    """`mmspec speak`: words said one after another into one WAV (`--out`), or a words file
    (`--prompts`, one word per line) into a resumable batch folder (`--out-dir`)."""
    from mmspec.runs.batch import read_items, write_manifest

    if bool(args.words) == bool(args.prompts):
        raise ValueError("give words to say (mmspec speak seven three --out ...) or --prompts FILE, not both or neither")
    if args.restart and not args.prompts:
        raise ValueError("--restart clears a batch folder: give it with --prompts and --out-dir")
    if args.words and args.out_dir is not None:
        raise ValueError("--out-dir is the folder of a --prompts batch; words are said into one WAV: give --out FILE")
    if args.prompts and args.out is not None:
        raise ValueError("--out names the WAV of words said; a --prompts batch writes into --out-dir")
    args.out, args.out_dir = args.out or DEFAULT_WAV, args.out_dir or DEFAULT_BATCH_DIR
    if args.words:
        check_wav_path(args.out, args.overwrite)
    else:
        check_writable(Path(args.out_dir))
    [config] = decoding_configs(args)
    sampling = sampling_kwargs(args)
    pipe = load(args)
    if getattr(pipe, "speaks_text", False):
        return speak_text(pipe, args, config, sampling)
    if args.voice is not None or args.max_new_tokens is not None:
        raise ValueError(f"--voice and --max-new-tokens are for text-to-speech pipelines; {args.pipeline} says words from a list")
    if not hasattr(pipe, "words"):
        raise ValueError(f"{args.pipeline} holds a {type(pipe).__name__}, not a speech pipeline")
    config = pipe.check_decoding(config, pipe.steps_for(args.duration))
    if args.prompts:
        items = read_items(args.prompts, None)
        if args.duration is not None:
            sampling["duration_s"] = args.duration
        done = run_audio_batch(pipe, items, args.out_dir, decoding=config, seed=args.seed, call_kwargs=sampling,
                               pipeline=recorded_pipeline(args.pipeline), restart=args.restart)
        print(f"wrote {len(done)} clips ({len(items) - len(done)} already done) {describe_placement(pipe)}; "
              f"manifest: {write_manifest(args.out_dir, items)}")
        return
    out = pipe(list(args.words), decoding=config, duration_s=args.duration, generator=torch.Generator().manual_seed(args.seed),
               **sampling)
    write_wav(args.out, out.audios.reshape(-1), out.sample_rate)
    forwards = [s.forward_passes for s in out.stats]
    print(f"wrote {args.out} ({', '.join(args.words)}; {out.audios.shape[-1] * len(forwards) / out.sample_rate:.2f} s)")
    print(f"decoding: {config.describe()} ({'exact' if all(s.exact for s in out.stats) else 'relaxed'}): "
          f"{sum(forwards) / len(forwards):.1f} forward passes per word (AR needs {out.tokens.shape[1]}), "
          f"{out.stats[0].wall_time_s:.2f} s {describe_placement(pipe)}")


def add_parser(sub) -> None:
    s = sub.add_parser("speak", help="say words (the speech model) or a text (a text-to-speech pipeline) into a WAV, "
                                     "or a file of them into a resumable batch")
    add_pipeline(s, SPEECH_ASSETS, "speech")
    add_method(s)
    add_decoding(s)
    for action in s._actions:  # the shared help names image methods (zipar, lpd-20, above) that no speech pipeline takes
        action.help = {"decoding": DECODING_HELP, "init": INIT_HELP, "zipar_window": argparse.SUPPRESS}.get(action.dest, action.help)
    s.add_argument("words", nargs="*", help="words to say, one after another (seven three ...), or the text to say")
    s.add_argument("--duration", type=float, help="seconds per word (default: the model's clip length)")
    s.add_argument("--voice", help="text-to-speech: one of the model's voices (tara, leo, ... for Orpheus)")
    s.add_argument("--max-new-tokens", type=positive_int, help="text-to-speech: the longest clip in tokens (default: the model's)")
    s.add_argument("--out", help=f"output WAV for words (default {DEFAULT_WAV})")
    s.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    s.add_argument("--prompts", help="batch: a text file of words or texts, one per line (or .jsonl with prompt and id)")
    s.add_argument("--out-dir", help=f"with --prompts: the batch folder of audio/, records/, run.json, manifest.jsonl (default {DEFAULT_BATCH_DIR})")
    s.add_argument("--restart", action="store_true", help="with --prompts: delete an earlier run's results in --out-dir and start over")
    s.set_defaults(run=speak_command)
