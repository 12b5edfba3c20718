"""`mmspec video`: videos from a saved `VideoPipeline` (the shipped video model by default).

Two modes, one verb:

    mmspec video --classes "circle right" 3 --per-class 2 --out outputs/videos      # GIF (or --format mp4) per video
    mmspec video --batch labels.txt --out outputs/video_batch                        # one video per line

Both are a run of `mmspec.runs.runner`: `videos/{id}.{format}` and `records/{id}.json`
per video, `run.json` (the settings and every video's class and seed; a rerun with other
settings, or another class for an id, is refused until `--restart`), then
`manifest.jsonl`; a rerun skips what is done. With `--classes` a video's id is
`{class}_{seed}` (spaces in a class name become `_`), its seed `--seed + i` for the i-th
of its class; in a batch the id is the line's, its seed drawn from `--seed` and the id. A
folder holding the `{class}_{seed}.{format}` files that `--classes` wrote before its runs
were recorded is refused until `--restart`, which deletes them. Decoding defaults to
MC-SJD with previous-frame drafts; `--frame-rows R` adds the frame schedule (a frame opens
once the previous has R committed rows; relaxed). `--per-class` and `--scale` are bounded
by the memory they imply, and checked before any decoding.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from pathlib import Path

import torch

from mmspec.assets import VIDEO_ASSETS
from mmspec.runs.batch import item_seed, read_items
from mmspec.runs.paths import FILE_NAME, class_file_name
from mmspec.io.files import atomic_write, check_writable
from mmspec.runs.runner import RESTART, Run, RunItem
from mmspec.io.video import VIDEO_FORMATS, check_format

# a video's upscaled frames are held in memory at once before they are encoded
MAX_VIDEO_BYTES = 2**30
# wider frames than this are no preview of a 32-pixel model, and slow every encoder
MAX_FRAME_SIDE = 4096


def add_parser(sub) -> None:
    v = sub.add_parser("video", help="generate videos (GIF or MP4) from a video pipeline, per class or as a resumable batch")
    add_video_arguments(v)
    v.set_defaults(run=run)


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
    p.add_argument("--restart", action="store_true", help="delete an earlier run's results in --out and start over")
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
    """The verb: flags and output checked first, then the model, then every bound and file
    name, then one video at a time."""
    from mmspec.pipelines import load_pipeline
    from mmspec.pipelines.video import VideoPipeline

    fmt = check_format(args.format)
    config = decoding_config(args)
    if args.per_class < 1:
        raise ValueError(f"--per-class must be >= 1, got {args.per_class}")
    if args.scale < 1:
        raise ValueError(f"--scale must be >= 1, got {args.scale}")
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
    check_scale(args.scale, frames, frame_size(pipe))
    sampling = {k: v for k, v in dict(guidance_scale=args.guidance_scale, temperature=args.temperature).items() if v is not None}
    if args.batch:
        tasks = [RunItem(item.id, {"class_label": item.class_label}, item_seed(args.seed, item.id))
                 for item in read_items(args.batch, len(pipe.class_names))]
    else:
        if args.per_class > pipe.max_images_per_call:
            raise ValueError(f"--per-class {args.per_class} is more than the {pipe.max_images_per_call} videos one call of this "
                             "model may decode (what its key-value cache budget holds); use --batch for large runs")
        labels = list(range(len(pipe.class_names))) if not args.classes else [pipe.class_label(parse_class(c)) for c in args.classes]
        # class names come from the saved pipeline: they name files only once checked
        tasks = [RunItem(f"{class_file_name(pipe.class_names[label])}_{args.seed + i}", {"class_label": label}, args.seed + i)
                 for label in dict.fromkeys(labels) for i in range(args.per_class)]
    run_videos(pipe, args, config, frames, fmt, sampling, out_dir, tasks)


def frame_size(pipe) -> tuple[int, int]:
    """A frame's (height, width) in pixels: its token grid times the VQ's downsampling."""
    rows, cols = pipe.frame_grid
    return rows * pipe.vqvae.config.downsample, cols * pipe.vqvae.config.downsample


def check_scale(scale: int, frames: int, size: tuple[int, int]) -> int:
    """`scale`, refused in one line when `frames` frames of `size` (height, width) pixels,
    each pixel `scale` x `scale` times larger, would pass `MAX_FRAME_SIDE` or
    `MAX_VIDEO_BYTES` (RGB, one byte a channel): checked before any decoding."""
    h, w = size
    limit = max(1, min(MAX_FRAME_SIDE // max(h, w), math.isqrt(MAX_VIDEO_BYTES // (frames * h * w * 3))))
    if isinstance(scale, bool) or not isinstance(scale, int) or not 1 <= scale <= limit:
        raise ValueError(f"--scale must be a whole number from 1 to {limit} for {frames} frames of {w}x{h} pixels (at most "
                         f"{MAX_FRAME_SIDE} pixels a side and {MAX_VIDEO_BYTES // 2**30} GiB a video), got {scale!r}")
    return scale


def parse_class(text: str):
    """A class given on the command line: a label ("3") or a name ("circle right")."""
    return int(text) if text.strip().lstrip("-").isdigit() else text


def write_one(pipe, label: int, seed: int, config, frames: int, sampling: dict, path: Path, scale: int):
    out = pipe([label], num_frames=frames, decoding=config, generator=torch.Generator().manual_seed(seed), **sampling)
    atomic_write(path, lambda tmp: pipe.save_video(out.videos[0], tmp, scale=scale, fmt=path.suffix.lstrip(".")))
    return out


def earlier_videos(out_dir: Path, class_names: list[str]) -> list[str]:
    """The `{class}_{seed}.{format}` files at the top of `out_dir` that `--classes` wrote
    before its runs were recorded (names of no class of the pipeline are not ours)."""
    stems = [name.replace(" ", "_") for name in class_names]
    stems = [re.escape(stem) for stem in stems if FILE_NAME.fullmatch(stem)]
    if not stems or not out_dir.is_dir():
        return []
    pattern = re.compile(rf"(?:{'|'.join(stems)})_\d+\.(?:{'|'.join(VIDEO_FORMATS)})")
    return sorted(path.name for path in out_dir.iterdir() if pattern.fullmatch(path.name) and path.is_file())


def run_videos(pipe, args, config, frames: int, fmt: str, sampling: dict, out_dir: Path, tasks: list[RunItem]) -> None:
    """One video per task, as a resumable run: tasks whose record exists are skipped; a
    folder holding a run with other settings or classes, or videos of the layout before
    runs were recorded, is refused until `--restart`."""
    earlier = earlier_videos(out_dir, pipe.class_names)
    if earlier and not args.restart:
        more = f" and {len(earlier) - 1} more" if len(earlier) > 1 else ""
        raise ValueError(f"{out_dir} holds videos written before runs were recorded ({earlier[0]}{more}), without a record of "
                         f"their settings; {RESTART}")
    video = f"videos/{{id}}.{fmt}"
    settings = {"pipeline": str(Path(args.pipeline).resolve()), "decoding": {"name": config.name, **dataclasses.asdict(config)},
                "frames": frames, "seed": args.seed, "format": fmt, "scale": args.scale,
                "sampling": {**pipe.default_sampling, **sampling}}
    run = Run(out_dir, settings, tasks, outputs=(video,), earlier_layout=tuple(earlier)).start(args.restart)
    todo = run.todo()
    for task in todo:
        label = task.inputs["class_label"]
        path = run.path(task, video)
        out = write_one(pipe, label, task.seed, config, frames, sampling, path, args.scale)
        run.write_record(task, {"class_name": pipe.class_names[label], "video": str(path.relative_to(out_dir)),
                                "forward_passes": out.stats[0].forward_passes})
        print(f"wrote {path}: {out.stats[0].forward_passes} forwards for {out.tokens.shape[1]} tokens ({config.describe()})")
    manifest = run.write_manifest()
    print(f"wrote {len(todo)} videos ({len(tasks) - len(todo)} already done); manifest: {manifest}")
