"""The `mmspec` command line: generate, bench, batch, demo.

Every verb works on a saved pipeline directory (`--pipeline`, the shipped model by
default). A user error prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
import time
from pathlib import Path

import torch

log = logging.getLogger("mmspec")

DEFAULT_PIPELINE = Path(__file__).resolve().parent.parent / "assets" / "default"


class UserError(Exception):
    """A mistake in the command line or its inputs: reported in one line, exit status 2."""


def load(args):
    from mmspec.pipelines import load_pipeline

    if args.threads:
        torch.set_num_threads(args.threads)
    pipe = load_pipeline(args.pipeline)
    pipe.set_progress_bar_config(desc="decoding", unit="tok", leave=False)
    return pipe


def is_class_conditional(pipe) -> bool:
    config = getattr(getattr(pipe, "transformer", None), "config", None)
    return getattr(config, "model_type", None) == "c2i"


def decoding_config(args):
    from mmspec.decoding.config import DecodingConfig

    return DecodingConfig.from_name(args.decoding, window=args.window, zipar_window=args.zipar_window, init=args.init)


def sampling_kwargs(args) -> dict:
    chosen = dict(guidance_scale=args.guidance_scale, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    return {k: v for k, v in chosen.items() if v is not None}


def conditions(args, pipe) -> tuple[list[dict], list[str]]:
    """One pipeline-call condition per grid row, and the rows' names."""
    if is_class_conditional(pipe):
        if args.prompt:
            raise UserError("this pipeline is class-conditional: use --classes, not --prompt")
        n = pipe.transformer.config.num_classes
        names = pipe.class_names or [str(i) for i in range(n)]
        classes = list(range(n)) if args.classes is None else args.classes
        if not classes or any(c < 0 or c >= n for c in classes):
            raise UserError(f"--classes must be one or more labels in [0, {n}), got {classes}")
        return [{"class_labels": [c]} for c in classes], [names[c] for c in classes]
    if args.classes is not None:
        raise UserError("this pipeline is text-conditional: use --prompt, not --classes")
    if not args.prompt:
        raise UserError("--prompt is required for a text-conditional pipeline")
    return [{"prompt": p} for p in args.prompt], list(args.prompt)


def cmd_generate(args) -> None:
    from mmspec.batch import atomic_write
    from mmspec.images import image_grid

    started = time.perf_counter()
    pipe = load(args)
    rows, names = conditions(args, pipe)
    if args.per_class < 1:
        raise UserError(f"--per-class must be >= 1, got {args.per_class}")
    config = decoding_config(args)
    images, forwards, decode_s = [], [], 0.0
    for i, row in enumerate(rows):
        out = pipe(**row, num_images_per_prompt=args.per_class, decoding=config,
                   generator=torch.Generator().manual_seed(args.seed + i), **sampling_kwargs(args))
        images += out.images
        forwards += [s.forward_passes for s in out.stats]
        decode_s += out.stats[0].wall_time_s
        print(f"row {i + 1}/{len(rows)} ({names[i]}): {sum(forwards[-args.per_class:]) / args.per_class:.0f} forward passes per image",
              flush=True)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out_path, lambda tmp: image_grid(images, cols=args.per_class, scale=2).save(tmp, format="PNG"))
    T = pipe.transformer.config.block_size if hasattr(pipe, "transformer") else len(out.tokens[0])
    print(f"wrote {out_path} ({len(rows)} rows x {args.per_class} images; rows: {', '.join(names)})")
    print(f"decoding: {config.name} ({'exact' if config.exact else 'approximate'}); "
          f"forward passes: {sum(forwards) / len(forwards):.1f} per image on average (AR needs {T}); "
          f"decoding wall time: {decode_s:.1f} s, total wall time: {time.perf_counter() - started:.1f} s")


def cmd_bench(args) -> None:
    from tqdm import tqdm

    from mmspec.bench import environment, report, run_methods

    pipe = load(args)
    pipe.set_progress_bar_config(disable=True)
    rows, names = conditions(args, pipe)
    items = [row for row in rows for _ in range(args.per_class)]
    bar = tqdm(total=len(args.methods) * len(items), desc="bench", unit="img")
    results = run_methods(pipe, items, args.methods, seed=args.seed, call_kwargs=sampling_kwargs(args),
                          on_progress=lambda name, done, total: bar.update(1))
    bar.close()
    meta = {"description": f"{args.pipeline}: {', '.join(names)}; {args.per_class} image(s) each, batch 1",
            "seed": args.seed, **environment()}
    md, _, png = report(results, args.out_dir, "bench", meta)
    print(md.read_text())
    print(f"wrote {md} and {png}")


def cmd_batch(args) -> None:
    from accelerate import PartialState
    from tqdm import tqdm

    from mmspec.batch import read_items, run_batch, write_manifest

    state = PartialState(cpu=not torch.cuda.is_available())
    pipe = load(args)
    if state.device.type == "cuda":
        pipe.to(state.device)
    pipe.set_progress_bar_config(disable=True)
    items = read_items(args.prompts, is_class_conditional(pipe))
    if is_class_conditional(pipe):
        n = pipe.transformer.config.num_classes
        bad = [it for it in items if not 0 <= it.class_label < n]
        if bad:
            raise UserError(f"{args.prompts}: item {bad[0].id} has class label {bad[0].class_label}, not in [0, {n})")
    mine = items[state.process_index :: state.num_processes]
    bar = tqdm(total=len(mine), desc=f"batch (process {state.process_index + 1}/{state.num_processes})", unit="img",
               position=state.process_index)
    run_batch(pipe, items, args.out, decoding=args.decoding, seed=args.seed, rank=state.process_index,
              world_size=state.num_processes, call_kwargs=sampling_kwargs(args), on_item=lambda item, skipped: bar.update(1))
    bar.close()
    state.wait_for_everyone()
    if state.is_main_process:
        manifest = write_manifest(args.out, items)
        print(f"wrote {len(items)} items; manifest: {manifest}")


def cmd_demo(args) -> None:
    app_file = Path(__file__).resolve().parent.parent / "apps" / "demo.py"
    if not app_file.is_file():
        raise UserError(f"the demo app ships with the source tree ({app_file} is missing); run from a checkout")
    spec = importlib.util.spec_from_file_location("mmspec_demo_app", app_file)
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    app.launch(load(args), host=args.host, port=args.port)


def add_common(p: argparse.ArgumentParser, decoding_default: str = "mc-sjd") -> None:
    p.add_argument("--pipeline", default=str(DEFAULT_PIPELINE), help="saved pipeline directory (default: the shipped model)")
    p.add_argument("--decoding", default=decoding_default,
                   help=f"decoding method: ar, sjd, mc-sjd, sjd+lantern, mc-sjd+gsd, zipar, zipar+mc-sjd, ... (default {decoding_default})")
    p.add_argument("--window", type=int, default=16, help="Jacobi draft window L (default 16)")
    p.add_argument("--zipar-window", type=int, default=8, help="ZipAR: open a row when the row above has this many tokens (default 8)")
    p.add_argument("--init", default="random", help="first drafts: random, left or above (default random)")
    p.add_argument("--guidance-scale", type=float, help="classifier-free guidance scale (default: the pipeline's)")
    p.add_argument("--temperature", type=float, help="sampling temperature, 0 = greedy (default: the pipeline's)")
    p.add_argument("--top-k", type=int, help="top-k filter, 0 = off (default: the pipeline's)")
    p.add_argument("--top-p", type=float, help="nucleus filter in (0, 1] (default: the pipeline's)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")


def add_condition(p: argparse.ArgumentParser) -> None:
    p.add_argument("--classes", type=int, nargs="*", help="class labels, one row each (c2i; default: all)")
    p.add_argument("--prompt", nargs="*", help="prompts, one row each (t2i)")
    p.add_argument("--per-class", type=int, default=4, help="images per class or prompt (default 4)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mmspec", description="Parallel decoding for autoregressive generators.")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate a grid of images, one row per class or prompt")
    add_common(g)
    add_condition(g)
    g.add_argument("--out", default="outputs/grid.png", help="output PNG (default outputs/grid.png)")
    g.set_defaults(run=cmd_generate)

    b = sub.add_parser("bench", help="compare decoding methods on the same conditions and seeds")
    add_common(b)
    add_condition(b)
    b.set_defaults(per_class=2)
    b.add_argument("--methods", nargs="+", default=["ar", "sjd", "mc-sjd", "mc-sjd+gsd", "zipar+mc-sjd"],
                   help="decoding methods to compare (default: ar sjd mc-sjd mc-sjd+gsd zipar+mc-sjd)")
    b.add_argument("--out-dir", default="outputs/bench", help="where bench.md/.json/.png go (default outputs/bench)")
    b.set_defaults(run=cmd_bench)

    t = sub.add_parser("batch", help="one image per line of a prompts/labels file, resumable; scales out with accelerate launch")
    add_common(t)
    t.add_argument("--prompts", required=True, help="text file (one prompt or class label per line) or JSONL (id, prompt|class_label)")
    t.add_argument("--out", required=True, help="output directory: images/, records/, manifest.jsonl")
    t.set_defaults(run=cmd_batch)

    d = sub.add_parser("demo", help="launch the Gradio demo app")
    d.add_argument("--pipeline", default=str(DEFAULT_PIPELINE), help="saved pipeline directory (default: the shipped model)")
    d.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    d.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    d.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    d.set_defaults(run=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = build_parser().parse_args(argv)
    try:
        if hasattr(args, "decoding"):
            decoding_config(args)  # a bad method or parameter fails before any loading
        args.run(args)
    except (UserError, ValueError) as err:
        print(f"mmspec {args.command}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
