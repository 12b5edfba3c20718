"""Trains the shipped image model's learned draft head and installs it in mmspec/assets/default/drafter.

The same run as `mmspec train-drafter --pipeline default --out WORK --install` at its
defaults (3000 steps of 16 sequences, the model's own AR samples drawn 32 at a time, seed
0), on 2 threads; rerun to resume from the work folder.

    PYTHONPATH=. python scripts/train_default_drafter.py            # or rerun to resume
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if not __package__:  # run as `python scripts/train_default_drafter.py`: the repository root, as with PYTHONPATH=.
    sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

import torch

from mmspec.assets import DEFAULT_ASSETS
from mmspec.commands.train_drafter import install
from mmspec.pipelines.llamagen import LlamaGenPipeline
from mmspec.runs.train_drafter import train_drafter
from scripts._training import script_parser, start


def main(argv=None) -> None:
    args = script_parser(__doc__, "outputs/train/drafter", DEFAULT_ASSETS, threads=2).parse_args(argv)
    work = start(args)
    pipe = LlamaGenPipeline.from_pretrained(args.assets)
    pipe.set_progress_bar_config(disable=True)
    started = time.monotonic()
    train_drafter(pipe, work, seed=args.seed, progress=lambda line: print(line, flush=True))
    print(f"trained in {(time.monotonic() - started) / 60:.1f} min of this run")
    install(work / "drafter", args.assets)


if __name__ == "__main__":
    main()
