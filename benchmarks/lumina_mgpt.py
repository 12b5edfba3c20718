"""Lumina-mGPT: forwards and wall time of every exact method and the relaxed ones, AR beside them.

    PYTHONPATH=. python benchmarks/lumina_mgpt.py                       # the tiny fixture model, CPU, ~1 min
    PYTHONPATH=. python benchmarks/lumina_mgpt.py --pipeline DIR --device cuda --dtype bfloat16 \\
        --height 768 --width 768 --prompts 8 --name lumina_mgpt_7b_768  # a saved LuminaMGPTPipeline folder

The default run uses the random 2-layer model of `tests/fixtures/lumina_mgpt` (made by
Lumina-mGPT's own code) with a random VQGAN: its forwards say how the engine and the layout
(forced new lines) behave, not what a trained model accepts. Each method decodes the same
prompts and seeds, one image per call, at Lumina-mGPT's sampling (CFG 4, top-k 2000,
temperature 1). Writes `benchmarks/results/<name>.{md,json,png}`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from mmspec.runs.bench import environment, report, run_methods
from mmspec.decoding.config import DecodingConfig

METHODS = [
    "ar", "sjd", "mc-sjd",
    DecodingConfig.from_name("mc-sjd", init="above"),
    DecodingConfig.from_name("mc-sjd", window=16, branches=4, branch_slots=4, branch_length=2),
    "auto", "sjd+lantern", "mc-sjd+gsd", "zipar+mc-sjd",
]
PROMPTS = ["a red panda in the snow", "a lighthouse at dusk", "a bowl of ramen", "a city street at night",
           "a cat on a windowsill", "mountains over a lake", "a vintage car", "a field of sunflowers"]


def tiny_pipeline():
    from mmspec.pipelines.lumina_mgpt import LuminaMGPTPipeline
    from tests.helpers.lumina import fixture_model, tiny_tokenizer, tiny_vqgan

    return LuminaMGPTPipeline(fixture_model("sdpa"), tiny_tokenizer(), tiny_vqgan(), height=128, width=128)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", help="a saved LuminaMGPTPipeline folder (default: the tiny fixture model)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts, one image each (default 4, at most 8)")
    parser.add_argument("--height", type=int, default=None)
    parser.add_argument("--width", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, help="e.g. bfloat16 (default: the checkpoint's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--name", default="lumina_mgpt_tiny")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.pipeline:
        from mmspec.pipelines import load_pipeline

        pipe = load_pipeline(args.pipeline, **({"torch_dtype": args.dtype} if args.dtype else {}))
    else:
        pipe = tiny_pipeline()
    pipe = pipe.to(args.device)
    pipe.set_progress_bar_config(disable=True)
    size = {k: v for k, v in (("height", args.height), ("width", args.width)) if v is not None}
    conditions = [{"prompt": [p]} for p in PROMPTS[: args.prompts]]
    results = run_methods(pipe, conditions, METHODS, seed=args.seed, call_kwargs=size,
                          on_progress=lambda name, done, total: print(f"{name}: {done}/{total}", flush=True))
    rows, cols = pipe.token_model(**size).rows, pipe.token_model(**size).cols
    meta = {
        "description": (
            f"{'the tiny fixture model (random weights)' if not args.pipeline else args.pipeline}, {len(conditions)} "
            f"prompts x 1 image per method, batch 1, {rows}x{cols} image tokens + a new line per row, sampling "
            f"{pipe.default_sampling}. Window 16 and random first drafts unless a row says otherwise. Forwards include "
            f"the prefill; wall time covers decoding and the VQGAN, methods run one after another on {args.device}."
        ),
        "seed": args.seed,
        "date": time.strftime("%Y-%m-%d"),
        **environment(),
    }
    md, js, png = report(results, Path(args.out), args.name, meta)
    print(md.read_text())
    print(f"wrote {md}, {js}, {png}")


if __name__ == "__main__":
    main()
