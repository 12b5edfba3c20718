"""`mmspec video`: videos from a saved `VideoPipeline` (the shipped video model by default).

Two modes, one verb:

    mmspec video --classes "circle right" 3 --per-class 2 --out outputs/videos      # GIF (or --format mp4) per video
    mmspec video --batch labels.txt --out outputs/video_batch                        # resumable: one video per line

Videos are named `{class}_{seed}.{format}`; a batch writes `videos/{id}.{format}` and
`records/{id}.json` per line (each item seeded from `--seed` and its id, so a rerun skips
what is done and redoes nothing else), then `manifest.jsonl`. Decoding defaults to MC-SJD
with previous-frame drafts; `--frame-rows R` adds the frame schedule (a frame opens once
the previous has R committed rows; relaxed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from mmspec.assets import VIDEO_ASSETS
from mmspec.batch import Item, atomic_write, check_writable, item_seed, read_items
from mmspec.video_io import VIDEO_FORMATS, check_format


def add_video_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pipeline", default=str(VIDEO_ASSETS), help="saved VideoPipeline directory (default: the shipped video model)")
    p.add_argument("--classes", nargs="*", help="class names or labels (default: all classes)")
    p.add_argument("--per-class", type=int, default=1, help="videos per class (default 1)")
    p.add_argument("--batch", help="text file, one class label per line (or .jsonl with class_label and id): resumable")
    p.add_argument("--frames", type=int, help="frames per video (default: the model's)")
    p.add_argument("--decoding", default="auto", help="decoding method: auto, ar, sjd, mc-sjd, zipar+mc-sjd, mc-sjd+gsd, ... (default auto)")
    p.add_argument("--init", default="previous-frame", help="first drafts: previous-frame, above, random, ... (default previous-frame)")
    p.add_argument("--window", type=int, default=16, help="Jacobi draft window (default 16)")
    p.add_argument("--zipar-window", type=int, default=4, help="ZipAR window within a frame, for zipar methods (default 4)")
    p.add_argument("--frame-rows", type=int, help="frame schedule: open a frame once the previous has this many rows (relaxed)")
    p.add_argument("--guidance-scale", type=float, help="classifier-free guidance scale (default: the pipeline's)")
    p.add_argument("--temperature", type=float, help="sampling temperature (default: the pipeline's)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--format", default="gif", help=f"output format: {', '.join(VIDEO_FORMATS)} (default gif)")
    p.add_argument("--scale", type=int, default=4, help="pixel upscaling of the written frames (default 4)")
    p.add_argument("--out", default="outputs/videos", help="output directory (default outputs/videos)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")


def decoding_config(args):
    """The `DecodingConfig` of the flags: a decoding name, its drafter, and the frame schedule."""
    from mmspec.decoding.config import DecodingConfig
    from mmspec.decoding.schedules import Frames

    config = DecodingConfig.from_name(args.decoding, window=args.window, zipar_window=args.zipar_window, init=args.init)
    if args.frame_rows is not None:
        config = dataclasses.replace(config, zipar_window=None, schedule=Frames(args.frame_rows, zipar_window=config.zipar_window))
    return config


def run(args) -> None:
    """The verb: flags and output checked first, then the model, then one video at a time."""
    from mmspec.pipelines import load_pipeline
    from mmspec.pipelines.video import VideoPipeline

    fmt = check_format(args.format)
    config = decoding_config(args)
    if args.per_class < 1:
        raise ValueError(f"--per-class must be >= 1, got {args.per_class}")
    if args.batch and args.classes:
        raise ValueError("give --classes or --batch, not both")
    out_dir = Path(args.out)
    check_writable(out_dir)
    if args.threads:
        torch.set_num_threads(args.threads)
    pipe = load_pipeline(args.pipeline)
    if not isinstance(pipe, VideoPipeline):
        raise ValueError(f"{args.pipeline} holds a {type(pipe).__name__}, not a VideoPipeline")
    pipe.set_progress_bar_config(disable=True)
    frames = pipe.check_num_frames(args.frames)
    config = pipe.check_decoding(config)
    sampling = {k: v for k, v in dict(guidance_scale=args.guidance_scale, temperature=args.temperature).items() if v is not None}
    if args.batch:
        run_batch(pipe, args, config, frames, fmt, sampling, out_dir)
        return
    labels = list(range(len(pipe.class_names))) if not args.classes else [pipe.class_label(parse_class(c)) for c in args.classes]
    for label in labels:
        for i in range(args.per_class):
            seed = args.seed + i
            path = out_dir / f"{pipe.class_names[label].replace(' ', '_')}_{seed}.{fmt}"
            out = write_one(pipe, label, seed, config, frames, sampling, path, args.scale)
            print(f"wrote {path}: {out.stats[0].forward_passes} forwards for {out.tokens.shape[1]} tokens ({config.describe()})")


def parse_class(text: str):
    """A class given on the command line: a label ("3") or a name ("circle right")."""
    return int(text) if text.strip().lstrip("-").isdigit() else text


def write_one(pipe, label: int, seed: int, config, frames: int, sampling: dict, path: Path, scale: int):
    out = pipe([label], num_frames=frames, decoding=config, generator=torch.Generator().manual_seed(seed), **sampling)
    atomic_write(path, lambda tmp: pipe.save_video(out.videos[0], tmp, scale=scale, fmt=path.suffix.lstrip(".")))
    return out


def run_batch(pipe, args, config, frames: int, fmt: str, sampling: dict, out_dir: Path) -> None:
    """One video per item of `--batch`; items whose record exists are skipped."""
    items = [Item(item.id, class_label=item.class_label) for item in read_items(args.batch, len(pipe.class_names))]
    settings = {"pipeline": str(Path(args.pipeline).resolve()), "decoding": config.describe(), "frames": frames,
                "seed": args.seed, "format": fmt, **sampling}
    settings_path = out_dir / "settings.json"
    if settings_path.exists() and json.loads(settings_path.read_text()) != settings:
        raise ValueError(f"{out_dir} holds a batch run with other settings ({settings_path}); choose another --out")
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(settings_path, lambda tmp: tmp.write_text(json.dumps(settings, indent=2) + "\n"))
    done = 0
    for item in items:
        record_path = out_dir / "records" / f"{item.id}.json"
        if record_path.exists():
            continue
        seed = item_seed(args.seed, item.id)
        path = out_dir / "videos" / f"{item.id}.{fmt}"
        path.parent.mkdir(parents=True, exist_ok=True)
        out = write_one(pipe, item.class_label, seed, config, frames, sampling, path, args.scale)
        record = {"id": item.id, "class_label": item.class_label, "class_name": pipe.class_names[item.class_label], "seed": seed,
                  "video": str(path.relative_to(out_dir)), "forward_passes": out.stats[0].forward_passes}
        record_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(record_path, lambda tmp: tmp.write_text(json.dumps(record) + "\n"))
        done += 1
    manifest = out_dir / "manifest.jsonl"
    lines = [(out_dir / "records" / f"{item.id}.json").read_text() for item in items]
    atomic_write(manifest, lambda tmp: tmp.write_text("".join(lines)))
    print(f"wrote {done} videos ({len(items) - done} already done); manifest: {manifest}")
