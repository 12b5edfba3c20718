"""The `mmspec` command line: generate, bench, batch, caption, demo.

Every verb works on a saved pipeline directory (`--pipeline`, the shipped model by
default). A user error prints one line and exits with status 2, before any work: flags
are checked first, then the output destination, then what depends on the loaded model.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch

from mmspec.assets import DEFAULT_ASSETS
from mmspec.checkpoint import first_line

AR_BASELINE = "ar"
DEFAULT_DECODING = "auto"


class UserError(Exception):
    """A mistake in the command line or its inputs: reported in one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its errors on one line like every other mmspec error (no usage dump)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 1 to 65535, got {text!r}")
    return value


def seed_number(text: str) -> int:
    from mmspec.batch import MAX_SEED

    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be a whole number from 0 to {MAX_SEED}, got {text!r}")
    return value


# --- settings shared by every verb --------------------------------------------------------


def decoding_configs(args, default: str = DEFAULT_DECODING) -> list:
    """Every decoding a verb runs (bench: `--methods`, others: `--decoding`), each with the
    same `--window`, `--zipar-window`, `--init`, `--branches` and `--step-test`."""
    from mmspec.decoding.config import DecodingConfig

    names = args.methods if args.command == "bench" else [args.decoding or default]
    # LPD pipelines name their own decodings (lpd-20, ...); the pipeline checks those
    return [n if n.startswith("lpd") else DecodingConfig.from_name(n, window=args.window, zipar_window=args.zipar_window, init=args.init,
                                                                    branches=args.branches, step_test=args.step_test, cost=args.cost)
            for n in names]


def sampling_kwargs(args) -> dict:
    """The sampling flags that were given, checked (finite, in range) before any loading."""
    from mmspec.pipelines.pipeline_utils import sampling_config

    chosen = dict(guidance_scale=args.guidance_scale, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    chosen = {k: v for k, v in chosen.items() if v is not None}
    sampling_config({}, **chosen)
    return chosen


# the pipeline classes each verb runs (the demo takes every family), and the verb of each family
IMAGE_PIPELINES = ("LlamaGenPipeline", "LPDPipeline", "Emu3Pipeline", "JanusPipeline", "LuminaMGPTPipeline")
VERB_PIPELINES = {"generate": IMAGE_PIPELINES, "bench": IMAGE_PIPELINES, "batch": IMAGE_PIPELINES,
                  "caption": ("CaptioningPipeline",), "speak": ("SpeechPipeline",)}
FAMILY_VERBS = {**{name: "generate" for name in IMAGE_PIPELINES}, "CaptioningPipeline": "caption", "MeshPipeline": "mesh",
                "SpeechPipeline": "speak", "VideoPipeline": "video"}


def check_family(command: str, pipeline: str) -> None:
    """Refuses, before loading, a pipeline folder of a family the verb does not run, naming
    the verb that does (`generate` on the video model: use `mmspec video`)."""
    from mmspec.assets import pipeline_path
    from mmspec.pipelines.pipeline_utils import read_json

    accepted = VERB_PIPELINES.get(command)
    root = pipeline_path(pipeline)
    if accepted is None or not root.is_dir():
        return  # load_pipeline says what is wrong with a path that is not a pipeline
    name = read_json(root / "model_index.json", "pipeline").get("_class_name")
    if name in FAMILY_VERBS and name not in accepted:
        raise UserError(f"--pipeline {pipeline} holds a {name}, which `mmspec {command}` does not run (it takes "
                        f"{', '.join(accepted)}); use `mmspec {FAMILY_VERBS[name]} --pipeline {pipeline}`")


def load(args):
    from mmspec.pipelines import load_pipeline

    if args.threads:
        torch.set_num_threads(args.threads)
    check_family(args.command, args.pipeline)
    try:
        pipe = load_pipeline(args.pipeline)
    except OSError as err:
        raise UserError(f"cannot load the pipeline in {args.pipeline}: {err}") from None
    pipe.set_progress_bar_config(desc="decoding", unit="tok", leave=False)
    return pipe


def checked_decodings(args, pipe) -> list:
    """`decoding_configs`, each checked against the model (a window longer than its sequence...);
    without `--decoding`, the pipeline's default (LPD's lpd-20, the others' auto)."""
    return [pipe.check_decoding(config) for config in decoding_configs(args, pipe.default_decoding)]


def conditions(args, pipe) -> tuple[list[dict], list[str]]:
    """One pipeline-call condition per grid row, and the rows' names; `--per-class` checked
    against the images the model decodes in one call."""
    if args.per_class > pipe.max_images_per_call:
        raise UserError(f"--per-class {args.per_class} is more than the {pipe.max_images_per_call} images one call of this model "
                        "may decode (what its key-value cache budget holds); use `mmspec batch` for large runs")
    if pipe.condition_kind == "class":
        if args.prompt:
            raise UserError("this pipeline is class-conditional: use --classes, not --prompt")
        n = len(pipe.class_names)
        classes = list(range(n)) if args.classes is None else [class_index(c, pipe.class_names) for c in args.classes]
        if not classes:
            raise UserError(f"--classes must be one or more class names or labels in [0, {n})")
        if len(set(classes)) != len(classes):
            raise UserError(f"--classes lists a class twice ({classes}); each class is one row, --per-class sets its images")
        return [{"class_labels": [c]} for c in classes], [pipe.class_names[c] for c in classes]
    if args.classes is not None:
        raise UserError("this pipeline is text-conditional: use --prompt, not --classes")
    if not args.prompt:
        raise UserError("--prompt is required for a text-conditional pipeline")
    return [{"prompt": [p]} for p in args.prompt], list(args.prompt)


def class_index(text: str, class_names: list[str]) -> int:
    """A `--classes` entry: a class name ("circle") or a label ("0")."""
    if text in class_names:
        return class_names.index(text)
    if text.strip().isdigit() and int(text) < len(class_names):
        return int(text)
    raise UserError(f"--classes {text!r} is neither a class name ({', '.join(class_names)}) nor a label in [0, {len(class_names)})")


# --- output destinations, checked before any work ----------------------------------------


def check_new_file(path: Path, overwrite: bool) -> None:
    """`path` can be written: not a folder, not an existing file (unless `overwrite`), in a
    writable folder."""
    from mmspec.batch import check_writable

    if path.is_dir():
        raise UserError(f"output {str(path)!r} is a folder; give a file path such as {str(path / 'grid.png')!r}")
    if path.exists() and not overwrite:
        raise UserError(f"output {str(path)!r} exists; pass --overwrite to replace it, or choose another path")
    check_writable(path.parent)


def check_out_dir(out_dir: Path, files: tuple[Path, ...], overwrite: bool) -> None:
    from mmspec.batch import check_writable

    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"output directory {str(out_dir)!r} is a file")
    check_writable(out_dir)
    existing = [f.name for f in files if f.exists()]
    if existing and not overwrite:
        raise UserError(f"{out_dir} already holds {', '.join(existing)}; pass --overwrite to replace them, or choose another --out-dir")


# --- the verbs ---------------------------------------------------------------------------


def cmd_generate(args) -> None:
    from mmspec.batch import atomic_write
    from mmspec.images import image_grid, label_rows

    started = time.perf_counter()
    out_path = Path(args.out)
    if out_path.suffix.lower() != ".png":
        raise UserError(f"--out {args.out!r} must name a .png file")
    check_new_file(out_path, args.overwrite)
    replacing = out_path.exists()
    pipe = load(args)
    [config] = checked_decodings(args, pipe)
    rows, names = conditions(args, pipe)
    sampling = sampling_kwargs(args)
    images, outputs, ar_outputs = [], [], []
    compare = config.name != AR_BASELINE
    for i, row in enumerate(rows):
        seed = args.seed + i
        out = pipe(**row, num_images_per_prompt=args.per_class, decoding=config, generator=torch.Generator().manual_seed(seed), **sampling)
        images += out.images
        outputs.append(out)
        line = f"row {i + 1}/{len(rows)} ({names[i]}): {mean_forwards(out):.0f} forward passes per image, {out.stats[0].wall_time_s:.2f} s"
        if compare:  # AR on the same condition, seed and batch, right after: side by side on a noisy machine
            ar = pipe(**row, num_images_per_prompt=args.per_class, decoding=AR_BASELINE, generator=torch.Generator().manual_seed(seed),
                      **sampling)
            ar_outputs.append(ar)
            line += f" (AR {mean_forwards(ar):.0f} and {ar.stats[0].wall_time_s:.2f} s)"
        print(line, flush=True)
    grid = label_rows(image_grid(images, cols=args.per_class, scale=2), names)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out_path, lambda tmp: grid.save(tmp, format="PNG"))
    stats = [s for out in outputs for s in out.stats]
    exact = all(s.exact for s in stats)
    print(f"{'replaced' if replacing else 'wrote'} {out_path} ({len(rows)} rows x {args.per_class} images; rows: {', '.join(names)})")
    print(f"decoding: {config.describe()} ({'exact: samples the model' if exact else 'relaxed: approximates the model'}); "
          f"forward passes: {sum(s.forward_passes for s in stats) / len(stats):.1f} per image on average "
          f"(AR needs {pipe.sequence_length}); decoding wall time: {sum(o.stats[0].wall_time_s for o in outputs):.1f} s")
    if stats[0].choices is not None:
        from mmspec.decoding.auto import describe_choices, merge_choices

        print(f"auto chose: {describe_choices(merge_choices([s.choices for s in stats]))}")
    if compare:
        print(ar_comparison(outputs, ar_outputs, args.per_class))
    print(f"total wall time: {time.perf_counter() - started:.1f} s")


def mean_forwards(out) -> float:
    return sum(s.forward_passes for s in out.stats) / len(out.stats)


def ar_comparison(outputs: list, ar_outputs: list, per_class: int) -> str:
    """Every row against AR on the same condition, seed and batch, decoded right after it:
    the speed-up in seconds, not only in forwards."""
    method_s = sum(o.stats[0].wall_time_s for o in outputs)
    ar_s = sum(o.stats[0].wall_time_s for o in ar_outputs)
    method_f = sum(mean_forwards(o) for o in outputs) / len(outputs)
    ar_f = sum(mean_forwards(o) for o in ar_outputs) / len(ar_outputs)
    return (f"against AR on the same {len(outputs)} row(s) of {per_class} image(s), same seeds, torch threads "
            f"{torch.get_num_threads()}: AR {ar_s:.1f} s and {ar_f:.0f} forwards per image, {outputs[0].stats[0].method} "
            f"{method_s:.1f} s and {method_f:.0f}: {ar_f / max(method_f, 1e-9):.2f}x fewer forwards, "
            f"wall-time speed-up over AR {ar_s / max(method_s, 1e-9):.2f}x")


def cmd_bench(args) -> None:
    from tqdm import tqdm

    from mmspec.bench import environment, report, report_paths, run_methods

    check_out_dir(Path(args.out_dir), report_paths(args.out_dir, "bench"), args.overwrite)
    pipe = load(args)
    pipe.set_progress_bar_config(disable=True)
    configs = checked_decodings(args, pipe)
    rows, names = conditions(args, pipe)
    items = [row for row in rows for _ in range(args.per_class)]
    bar = tqdm(total=len(configs) * len(items), desc="bench", unit="img")
    results = run_methods(pipe, items, configs, seed=args.seed, call_kwargs=sampling_kwargs(args),
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

    from mmspec.batch import check_writable, clear_results, read_items, run_batch, write_manifest

    out_dir = Path(args.out)
    check_writable(out_dir)
    state = PartialState(cpu=not torch.cuda.is_available())
    pipe = load(args)
    if state.device.type == "cuda":
        pipe.to(state.device)
    pipe.set_progress_bar_config(disable=True)
    [config] = checked_decodings(args, pipe)
    items = read_items(args.prompts, pipe.class_names if pipe.condition_kind == "class" else None)
    if args.restart and state.is_main_process:
        clear_results(out_dir)
    state.wait_for_everyone()  # no process reads the folder while the main one clears it
    mine = items[state.process_index :: state.num_processes]
    bars = []  # the bar starts with the first item, after the run's checks: an error is a line of its own

    def progress(item, skipped: bool) -> None:
        if not bars:
            bars.append(tqdm(total=len(mine), desc=f"batch (process {state.process_index + 1}/{state.num_processes})", unit="img",
                             position=state.process_index))
        bars[0].update(1)

    run_batch(pipe, items, out_dir, decoding=config, seed=args.seed, rank=state.process_index, world_size=state.num_processes,
              call_kwargs=sampling_kwargs(args), pipeline=str(Path(args.pipeline).resolve()), on_item=progress)
    for bar in bars:
        bar.close()
    state.wait_for_everyone()
    if state.is_main_process:
        manifest = write_manifest(out_dir, items)
        print(f"wrote {len(items)} items; manifest: {manifest}")


def cmd_caption(args) -> None:
    from mmspec.captioning_batch import caption_command

    caption_command(args, load)


def cmd_mesh(args) -> None:
    from mmspec.mesh_cli import run

    run(args)


def cmd_speak(args) -> None:
    from mmspec.audio import speak_command

    speak_command(args)


def cmd_video(args) -> None:
    from mmspec.video_cli import run

    run(args)


def cmd_demo(args) -> None:
    try:
        from mmspec.apps.demo import launch
    except ModuleNotFoundError as err:
        if err.name != "gradio":
            raise
        raise UserError("the demo needs gradio, an optional extra: pip install 'mmspec[demo]'") from None
    check_port_free(args.host, args.port)
    pipe = load(args)
    try:
        launch(pipe, host=args.host, port=args.port)
    except OSError as err:  # the port was taken between the check and the launch
        raise UserError(f"cannot listen on {args.host}:{args.port} ({first_line(err)}); choose another --port") from None


def check_port_free(host: str, port: int) -> None:
    """Refuses, before the models load, a port another program holds or a host this machine
    cannot listen on."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise UserError(f"--host {host!r} is not an address this machine can listen on ({err.strerror})") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: a port held only in TIME_WAIT is free
        try:
            probe.bind(address)
        except OSError as err:
            raise UserError(f"cannot listen on {host}:{port} ({err.strerror}); choose another --port or --host") from None


# --- the parser --------------------------------------------------------------------------


def add_pipeline(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pipeline", default=str(DEFAULT_ASSETS),
                   help="saved pipeline directory, or a shipped model's name: default, lpd, video, mesh, speech, captioner "
                        "(default: the shipped image model)")
    p.add_argument("--threads", type=positive_int, help="torch CPU threads, >= 1 (default: torch's choice)")


def add_decoding(p: argparse.ArgumentParser) -> None:
    p.add_argument("--window", type=int, help="Jacobi draft window L, at most the sequence length (default 16; auto: chosen)")
    p.add_argument("--zipar-window", type=int, default=8, help="ZipAR: open a row when the row above has this many tokens (default 8)")
    p.add_argument("--init",
                   help="first drafts: random, left, above, previous-frame, lookup, or several joined by + (lookup+above); "
                        "default random (auto: chosen)")
    p.add_argument("--branches", type=int,
                   help="Jacobi methods: candidates per codebook beside each of the 4 leading drafts, verified under tree attention "
                        "(exact; more forward work, fewer forwards); default 0, none (auto: chosen on CUDA)")
    p.add_argument("--cost", choices=("cached", "refresh", "off"), default="cached",
                   help="auto's cost curve of the forward: cached (measured once per model, device and threads; default), "
                        "refresh (measure again) or off (choose by forwards alone)")
    p.add_argument("--step-test", default="per-token",
                   help="exact test of a step of several tokens (audio codebooks): per-token (default), joint (the step as one "
                        "token), or codebook groups such as 0+123")
    p.add_argument("--guidance-scale", type=float, help="classifier-free guidance scale (default: the pipeline's)")
    p.add_argument("--temperature", type=float, help="sampling temperature, 0 = greedy (default: the pipeline's)")
    p.add_argument("--top-k", type=int, help="top-k filter, 0 = off (default: the pipeline's)")
    p.add_argument("--top-p", type=float, help="nucleus filter in (0, 1] (default: the pipeline's)")
    p.add_argument("--seed", type=seed_number, default=0, help="random seed, 0 to 2**63 - 1 (default 0)")


def add_method(p: argparse.ArgumentParser) -> None:
    p.add_argument("--decoding",
                   help="decoding method: auto, ar, sjd, mc-sjd, sjd+lantern, mc-sjd+gsd, zipar, zipar+mc-sjd, ...; lpd-20 or "
                        "lpd-32 for an LPD pipeline (default: auto, hardware-aware exact decoding; lpd-20 for LPD)")


def add_condition(p: argparse.ArgumentParser, per_class: int) -> None:
    p.add_argument("--classes", nargs="*", help="class names or labels, one row each (class pipelines; default: all)")
    p.add_argument("--prompt", nargs="*", help="prompts, one row each (prompt pipelines)")
    p.add_argument("--per-class", type=positive_int, default=per_class, help=f"images per class or prompt (default {per_class})")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="mmspec", description="Parallel decoding for autoregressive generators.")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate a grid of images, one labelled row per class or prompt")
    add_pipeline(g)
    add_method(g)
    add_decoding(g)
    add_condition(g, per_class=4)
    g.add_argument("--out", default="outputs/grid.png", help="output PNG (default outputs/grid.png)")
    g.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    g.set_defaults(run=cmd_generate)

    b = sub.add_parser("bench", help="compare decoding methods on the same conditions and seeds")
    add_pipeline(b)
    add_decoding(b)
    add_condition(b, per_class=2)
    b.add_argument("--methods", nargs="+", default=["ar", "sjd", "mc-sjd", "mc-sjd+gsd", "zipar+mc-sjd"],
                   help="decoding methods to compare (default: ar sjd mc-sjd mc-sjd+gsd zipar+mc-sjd)")
    b.add_argument("--out-dir", default="outputs/bench", help="where bench.md/.json/.png go (default outputs/bench)")
    b.add_argument("--overwrite", action="store_true", help="replace the bench files in --out-dir if they exist")
    b.set_defaults(run=cmd_bench)

    t = sub.add_parser("batch", help="one image per line of a prompts/labels file, resumable; scales out with accelerate launch")
    add_pipeline(t)
    add_method(t)
    add_decoding(t)
    t.add_argument("--prompts", required=True, help="text file (one prompt, or class name or label, per line) or .jsonl (objects with prompt or a "
                        "class_label, a class name or label, and an optional id: a plain file name)")
    t.add_argument("--out", required=True, help="output directory: images/, records/, run.json, manifest.jsonl")
    t.add_argument("--restart", action="store_true",
                   help="delete the results of an earlier run in --out (needed when its settings differ) and start over")
    t.set_defaults(run=cmd_batch)

    c = sub.add_parser("caption", help="caption image files or folders of them; with --out, a resumable batch")
    c.add_argument("images", nargs="+", help="image files, or folders of them")
    c.add_argument("--pipeline", default=str(DEFAULT_ASSETS.parent / "captioner"),
                   help="saved captioning pipeline directory, or captioner (default: the shipped captioner)")
    c.add_argument("--threads", type=positive_int, help="torch CPU threads, >= 1 (default: torch's choice)")
    c.add_argument("--prompt", help="the instruction after the image (default: the pipeline's)")
    c.add_argument("--decoding", default="prompt-lookup",
                   help="ar, sjd, mc-sjd, lookup, mc-sjd+lookup or prompt-lookup (default prompt-lookup)")
    c.add_argument("--max-new-tokens", type=positive_int, default=64, help="tokens per caption at most (default 64)")
    c.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    c.add_argument("--temperature", type=float, help="sampling temperature (with --sample)")
    c.add_argument("--top-k", type=int, help="top-k filter, 0 = off (with --sample)")
    c.add_argument("--top-p", type=float, help="nucleus filter in (0, 1] (with --sample)")
    c.add_argument("--seed", type=seed_number, default=0, help="random seed, 0 to 2**63 - 1 (default 0)")
    c.add_argument("--batch-size", type=positive_int, default=8, help="images per forward batch (default 8)")
    c.add_argument("--out", help="output directory for a resumable batch: records/, run.json, manifest.jsonl")
    c.add_argument("--restart", action="store_true", help="with --out: delete an earlier run's results there and start over")
    c.set_defaults(run=cmd_caption)

    from mmspec.mesh_cli import add_parser as add_mesh_parser

    add_mesh_parser(sub, add_pipeline, positive_int, seed_number)
    sub.choices["mesh"].set_defaults(run=cmd_mesh)

    s = sub.add_parser("speak", help="say words with the speech model into a WAV, or a words file into a resumable batch")
    add_pipeline(s)
    s.set_defaults(pipeline=str(DEFAULT_ASSETS.parent / "speech"))
    add_method(s)
    add_decoding(s)
    s.add_argument("words", nargs="*", help="words to say, one after another (seven three ...)")
    s.add_argument("--duration", type=float, help="seconds per word (default: the model's clip length)")
    s.add_argument("--out", default="outputs/speech.wav", help="output WAV for words (default outputs/speech.wav)")
    s.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    s.add_argument("--prompts", help="batch: a text file of words, one per line (or .jsonl with prompt and id)")
    s.add_argument("--out-dir", default="outputs/speech-batch", help="batch output: audio/, records/, run.json, manifest.jsonl")
    s.add_argument("--restart", action="store_true", help="with --prompts: delete an earlier run's results in --out-dir and start over")
    s.set_defaults(run=cmd_speak)

    from mmspec.video_cli import add_video_arguments

    v = sub.add_parser("video", help="generate videos (GIF or MP4) from a video pipeline, per class or as a resumable batch")
    add_video_arguments(v)
    v.set_defaults(run=cmd_video)

    d = sub.add_parser("demo", help="launch the Gradio demo app (needs the [demo] extra)")
    add_pipeline(d)
    d.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    d.add_argument("--port", type=port_number, default=7860, help="port, 1 to 65535 (default 7860)")
    d.set_defaults(run=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:  # --help, or a bad flag already reported in one line
        return exit.code
    try:
        if args.command not in ("demo", "caption", "mesh", "video"):  # bad flags fail before any loading (these check their own)
            decoding_configs(args)
            sampling_kwargs(args)
        args.run(args)
    except (UserError, ValueError) as err:
        message = " ".join(str(err).split())  # one line, even for a library's multi-line message
        print(f"mmspec {args.command}: error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
