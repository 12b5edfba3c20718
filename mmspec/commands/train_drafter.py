"""`mmspec train-drafter`: trains a learned draft head for a pipeline's model, resumable, with
progress; `--install` saves it into the pipeline folder, where it then loads by default."""

from __future__ import annotations

import shutil
from pathlib import Path

from mmspec.commands.common import UserError, add_pipeline, load, positive_int

# the head trains in float32 beside the frozen model, whose embeddings and output it reads: a
# bfloat16 model would mix dtypes in one matmul
TRAINING_DTYPES = ("float32",)


def add_parser(sub) -> None:
    t = sub.add_parser("train-drafter", help="train a learned draft head for a pipeline's model (exact drafts, fewer forwards)")
    add_pipeline(t, dtypes=TRAINING_DTYPES)
    t.add_argument("--out", required=True, help="work folder: the run's state (rerun to resume) and the head, in OUT/drafter")
    t.add_argument("--steps", type=positive_int, default=3000, help="optimiser steps (default 3000: about 40 min on 2 CPU cores "
                                                                     "for the shipped image model)")
    t.add_argument("--batch-size", type=positive_int, default=16, help="sequences per step (default 16)")
    t.add_argument("--layers", default="-1",
                   help="the model's layers the head reads, comma-separated (default -1: the last; several: EAGLE-3's fusion)")
    t.add_argument("--seed", type=int, default=0, help="seed of the samples and of the steps (default 0)")
    t.add_argument("--install", action="store_true", help="save the trained head into --pipeline as its drafter component")
    t.set_defaults(run=cmd_train_drafter)


def parse_layers(text: str) -> list[int]:
    try:
        layers = [int(part) for part in text.split(",")]
    except ValueError:
        raise UserError(f"--layers {text!r} must be layer indices joined by commas, such as -1 or 2,5,-1") from None
    return layers


def cmd_train_drafter(args) -> None:
    from mmspec.runs.placement import describe_placement
    from mmspec.runs.train_drafter import check_trainable, train_drafter

    layers = parse_layers(args.layers)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {args.out!r} is a file")
    pipe = load(args)
    check_trainable(pipe)
    n_layer = len(pipe.transformer.layers)
    bad = [i for i in layers if not -n_layer <= i < n_layer]
    if bad:
        raise UserError(f"--layers {args.layers}: the model has {n_layer} layers (indices {-n_layer} to {n_layer - 1})")
    pipe.set_progress_bar_config(disable=True)
    train_drafter(pipe, out, steps=args.steps, batch_size=args.batch_size, layers=layers, seed=args.seed,
                  progress=lambda line: print(line, flush=True))
    print(f"wrote {out / 'drafter'} (trained {describe_placement(pipe)})")
    if args.install:
        install(out / "drafter", args.pipeline)


def install(head: Path, pipeline: str) -> None:
    """Copies a trained head into a pipeline folder as its `drafter` component and names it
    in the folder's `model_index.json`; the folder then loads with it."""
    from mmspec.assets import pipeline_path
    from mmspec.pipelines.llamagen import LlamaGenPipeline
    from mmspec.utils.json_files import read_json, write_json

    root = pipeline_path(pipeline)
    target, staging = root / "drafter", root / ".drafter.partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(head, staging)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    index = read_json(root / "model_index.json", "pipeline")
    index["drafter"] = LlamaGenPipeline.declared_components["drafter"].entry
    write_json(root / "model_index.json", index)
    print(f"installed it as {target}: --pipeline {pipeline} now drafts with it (--drafter off turns it off)")
