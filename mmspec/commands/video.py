"""`mmspec video`: videos from a saved `VideoPipeline` (the shipped video model by default),
or continuations of videos from a saved `CosmosPipeline` (Cosmos-Predict1, video to world).

Four modes, one verb:

    mmspec video --classes "circle right" 3 --per-class 2 --out outputs/videos      # GIF (or --format mp4) per video
    mmspec video --batch labels.txt --out outputs/video_batch                        # one video per line
    mmspec video --pipeline COSMOS --input clip.mp4 --input-frames 9 --out outputs/world  # Cosmos: continue a video
    mmspec video --pipeline COSMOS --batch clips.jsonl --out outputs/worlds               # Cosmos: one video per line

Every mode is a run of `mmspec.runs.runner`: `videos/{id}.{format}` and `records/{id}.json`
per video, `run.json` (the settings, the dtype among them, the device, and every video's
inputs and seed; a rerun with other settings, or other inputs for an id, is refused until
`--restart`), then `manifest.jsonl`; a rerun skips what is done. With `--classes` a video's id is
`{class}_{seed}` (spaces in a class name become `_`), its seed `--seed + i` for the i-th
of its class; in a batch the id is the line's, its seed drawn from `--seed` and the id. A
folder holding the `{class}_{seed}.{format}` files that `--classes` wrote before its runs
were recorded is refused until `--restart`, which deletes them. Decoding defaults to
MC-SJD with previous-frame drafts; `--frame-rows R` adds the frame schedule (a frame opens
once the previous has R committed rows; relaxed). `--per-class` and `--scale` are bounded
by the memory they imply, and checked before any decoding.

A `CosmosPipeline` continues the first `--input-frames` frames (1, or 9, ...: the model's
`input_frame_choices`; default 1) of `--input`, an .mp4, a .gif or a folder of .png
frames, which must be of the model's frame size (nothing is resized); the video's id is
`{file stem}_{seed}`, its seed `--seed + i` for the i-th of `--per-input`. Its batch is a
.jsonl of objects with `id`, `video` (a path relative to the .jsonl's folder) and optional
`input_frames`. An item's inputs are its conditioning frames' count and SHA-256 (of the
decoded frames, not the file), so a rerun on other frames is refused. Every video is read
and checked before any decoding.

The flags of one family's mode are refused, in one line naming what to use instead, with
the other's pipeline (`--classes` with a Cosmos pipeline, `--input` with a class one),
before anything is loaded or written.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mmspec.assets import VIDEO_ASSETS
from mmspec.commands.common import (
    VIDEO_PIPELINES,
    add_device,
    check_family,
    load,
    pipeline_class_name,
    positive_int,
    recorded_pipeline,
    seed_number,
    thread_count,
)
from mmspec.runs.batch import item_seed, json_item, read_items, read_lines
from mmspec.runs.paths import FILE_NAME, class_file_name, file_name
from mmspec.runs.placement import describe_placement, placement
from mmspec.core.bounds import MAX_FRAME_SIDE, MAX_VIDEO_BYTES, max_video_scale
from mmspec.io.files import atomic_write, check_writable
from mmspec.runs.runner import RESTART, Run, RunItem
from mmspec.io.video import VIDEO_FORMATS, check_format, read_video

# the flags of one family's mode (argparse dest: flag, what to use instead with the other family's pipeline)
CLASS_FLAGS = {"classes": ("--classes", "--input VIDEO or --batch items.jsonl"), "per_class": ("--per-class", "--per-input"),
               "guidance_scale": ("--guidance-scale", "--temperature (Cosmos samples without guidance)"),
               "frames": ("--frames", "--input-frames (a Cosmos model's video length is fixed)")}
COSMOS_FLAGS = {"input": ("--input", "--classes or --batch labels.txt"),
                "input_frames": ("--input-frames", "--classes or --batch labels.txt (a class pipeline takes no video)"),
                "per_input": ("--per-input", "--per-class")}


def add_parser(sub) -> None:
    v = sub.add_parser("video", help="generate videos (GIF or MP4) from a video pipeline, per class or as a resumable batch, "
                                     "or continue videos with a Cosmos pipeline")
    add_video_arguments(v)
    v.set_defaults(run=run)


def add_video_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pipeline", default=str(VIDEO_ASSETS),
                   help="saved VideoPipeline or CosmosPipeline directory (default: the shipped video model)")
    p.add_argument("--classes", nargs="*", help="class pipelines: class names or labels (default: all classes)")
    p.add_argument("--per-class", type=int, help="class pipelines: videos per class (default 1)")
    p.add_argument("--input", help="Cosmos pipelines: the video to continue: an .mp4, a .gif or a folder of .png frames, of "
                                   "the model's frame size")
    p.add_argument("--input-frames", type=positive_int,
                   help="Cosmos pipelines: conditioning frames read from each video, 1 or 9, ... (default 1)")
    p.add_argument("--per-input", type=positive_int, help="Cosmos pipelines: continuations of --input (default 1)")
    p.add_argument("--batch", help="resumable batch: a text file of one class name or label per line (or .jsonl with class_label and "
                                   "id); for a Cosmos pipeline a .jsonl with id, video (relative to its folder) and optional "
                                   "input_frames")
    p.add_argument("--frames", type=int, help="class pipelines: frames per video (default: the model's)")
    p.add_argument("--decoding", default="auto", help="decoding method: auto, ar, sjd, mc-sjd, zipar+mc-sjd, mc-sjd+gsd, ... (default auto)")
    p.add_argument("--init", help="first drafts: previous-frame, above, random, ... (default previous-frame; auto: chosen)")
    p.add_argument("--window", type=int, help="Jacobi draft window (default 16; auto: chosen)")
    p.add_argument("--zipar-window", type=positive_int, default=4, help="ZipAR window within a frame, for zipar methods (default 4)")
    p.add_argument("--frame-rows", type=int, help="frame schedule: open a frame once the previous has this many rows (relaxed)")
    p.add_argument("--guidance-scale", type=float, help="class pipelines: classifier-free guidance scale (default: the pipeline's)")
    p.add_argument("--temperature", type=float, help="sampling temperature (default: the pipeline's)")
    p.add_argument("--seed", type=seed_number, default=0, help="random seed, 0 to 2**63 - 1 (default 0)")
    p.add_argument("--format", default="gif", help=f"output format: {', '.join(VIDEO_FORMATS)} (default gif)")
    p.add_argument("--scale", type=int, default=4, help="pixel upscaling of the written frames (default 4)")
    p.add_argument("--out", default="outputs/videos", help="output directory (default outputs/videos)")
    p.add_argument("--restart", action="store_true", help="delete an earlier run's results in --out and start over")
    p.add_argument("--threads", type=thread_count, help="torch CPU threads, 1 to the machine's cores (default: torch's choice)")
    add_device(p)


def decoding_config(args):
    """The `DecodingConfig` of the flags: a decoding name, its drafter, and the frame schedule."""
    from mmspec.decoding.config import DecodingConfig
    from mmspec.decoding.schedules import Frames

    config = DecodingConfig.from_name(args.decoding, window=args.window, zipar_window=args.zipar_window, init=args.init)
    if args.init is None and config.method != "auto":  # a video's first drafts: the frame before (a drafter in the name wins)
        config = DecodingConfig.from_name(args.decoding, window=args.window, zipar_window=args.zipar_window, init="previous-frame")
    if args.frame_rows is not None:
        config = dataclasses.replace(config, zipar_window=None, schedule=Frames(args.frame_rows, zipar_window=config.zipar_window))
    return config


def run(args) -> None:
    """The verb: flags checked first, then the pipeline's family (read, not loaded) against
    the mode's flags, the inputs' paths and the output; then the model, every bound, file
    name and input video; then one video at a time."""
    from mmspec.pipelines.cosmos import CosmosPipeline
    from mmspec.pipelines.video import VideoPipeline

    fmt = check_format(args.format)
    config = decoding_config(args)
    sampling = sampling_flags(args)
    if args.per_class is not None and args.per_class < 1:
        raise ValueError(f"--per-class must be >= 1, got {args.per_class}")
    if args.scale < 1:
        raise ValueError(f"--scale must be >= 1, got {args.scale}")
    given = {"--classes": args.classes is not None, "--input": args.input, "--batch": args.batch}
    modes = [flag for flag, chosen in given.items() if chosen]
    if len(modes) > 1:
        raise ValueError(f"give one of --classes, --input or --batch, not {' and '.join(modes)}")
    check_family("video", args.pipeline)
    family = pipeline_class_name(args.pipeline)
    if family in VIDEO_PIPELINES:
        check_mode_flags(args, family)
    items = cosmos_items(args) if family == "CosmosPipeline" else None
    out_dir = Path(args.out)
    check_writable(out_dir)
    pipe = load(args)
    if not isinstance(pipe, (VideoPipeline, CosmosPipeline)):
        raise ValueError(f"{args.pipeline} holds a {type(pipe).__name__}, not a VideoPipeline or a CosmosPipeline")
    pipe.set_progress_bar_config(disable=True)
    if isinstance(pipe, CosmosPipeline):
        run_cosmos(pipe, args, config, fmt, sampling, out_dir, items)
    else:
        run_classes(pipe, args, config, fmt, sampling, out_dir)


def sampling_flags(args) -> dict:
    """The sampling flags that were given, checked (finite, in range) before any loading."""
    from mmspec.pipelines.checks import sampling_config

    chosen = {k: v for k, v in dict(guidance_scale=args.guidance_scale, temperature=args.temperature).items() if v is not None}
    sampling_config({}, **chosen)
    return chosen


def check_mode_flags(args, family: str) -> None:
    """Refuses, in one line naming what to use instead, a flag of the other family's mode;
    and a Cosmos run without a video, or with a batch that is no .jsonl."""
    cosmos = family == "CosmosPipeline"
    for dest, (flag, instead) in (CLASS_FLAGS if cosmos else COSMOS_FLAGS).items():
        if getattr(args, dest) is not None:
            raise ValueError(f"{flag} does not apply to the {family} in {args.pipeline}: use {instead}")
    if not cosmos:
        return
    if not args.input and not args.batch:
        raise ValueError(f"the {family} in {args.pipeline} continues a video: give --input VIDEO (.mp4, .gif or a folder of "
                         ".png frames) or --batch items.jsonl")
    if args.batch and Path(args.batch).suffix != ".jsonl":
        raise ValueError(f'--batch for a {family} is a .jsonl of {{"id": ..., "video": ...}} objects, got {args.batch!r}')
    if args.batch and args.per_input is not None:
        raise ValueError("--per-input is for --input; a batch continues each of its lines once (give a video again under "
                         "another id for more)")


def run_classes(pipe, args, config, fmt: str, sampling: dict, out_dir: Path) -> None:
    """A class VideoPipeline's videos: per class (`--classes`) or per line of `--batch`."""
    frames = pipe.check_num_frames(args.frames)
    config = pipe.check_decoding(config)
    check_scale(args.scale, frames, frame_size(pipe))
    per_class = 1 if args.per_class is None else args.per_class
    if args.batch:
        tasks = [RunItem(item.id, {"class_label": item.class_label}, item_seed(args.seed, item.id))
                 for item in read_items(args.batch, pipe.class_names, "batch file")]
    else:
        if per_class > pipe.max_images_per_call:
            raise ValueError(f"--per-class {per_class} is more than the {pipe.max_images_per_call} videos one call of this "
                             "model may decode (what its key-value cache budget holds); use --batch for large runs")
        labels = list(range(len(pipe.class_names))) if not args.classes else [pipe.class_label(parse_class(c)) for c in args.classes]
        # class names come from the saved pipeline: they name files only once checked
        tasks = [RunItem(f"{class_file_name(pipe.class_names[label])}_{args.seed + i}", {"class_label": label}, args.seed + i)
                 for label in dict.fromkeys(labels) for i in range(per_class)]

    def condition(task: RunItem) -> tuple[dict, dict]:
        label = task.inputs["class_label"]
        return {"class_labels": [label], "num_frames": frames}, {"class_name": pipe.class_names[label]}

    settings = video_settings(pipe, args, config, frames, fmt, sampling)
    earlier = tuple(earlier_videos(out_dir, pipe.class_names))
    run_videos(pipe, args, settings, config, sampling, out_dir, tasks, condition, earlier)


# --- Cosmos: videos to continue ------------------------------------------------------------


@dataclass(frozen=True)
class VideoItem:
    """One video to continue: its id (a plain file name), its file, and its conditioning
    frame count with what gave it (`--input-frames`, or a batch line's `input_frames`), for
    errors."""

    id: str
    video: Path
    input_frames: int
    given_by: str = "--input-frames"

    def __post_init__(self):
        file_name(self.id, "item id")


def cosmos_items(args) -> list[VideoItem]:
    """The videos of `--input` or `--batch`, each checked to exist (read later, once the
    model says what it takes)."""
    input_frames = 1 if args.input_frames is None else args.input_frames
    if args.batch:
        return read_video_items(args.batch, input_frames)
    path = Path(args.input)
    check_exists(path)
    return [VideoItem(file_name(path.stem, f"--input {args.input!r}: its name"), path, input_frames)]


def check_exists(path: Path) -> None:
    if not path.is_file() and not path.is_dir():
        raise ValueError(f"video {str(path)!r} does not exist")


def read_video_items(path: str | Path, input_frames: int) -> list[VideoItem]:
    """The items of a Cosmos batch: a .jsonl of objects with `video` (a path relative to the
    file's folder), optional `id` (default: the line number) and optional `input_frames`
    (default `input_frames`), as `mmspec.runs.batch.read_items` reads its .jsonl: ids are
    plain file names, each once; a bad line, or a missing video, is a one-line ValueError
    naming the file and the line."""
    path = Path(path)

    def parse(line: str, number: int) -> VideoItem:
        item = video_item(line, number, path, input_frames)
        check_exists(item.video)
        return item

    return read_lines(path, parse, "batch file")


def video_item(line: str, number: int, path: Path, input_frames: int) -> VideoItem:
    item_id, obj = json_item(line, number, '{"id": "drive", "video": "drive.mp4"}')
    video = obj.get("video")
    if not isinstance(video, str) or not video.strip():
        raise ValueError(f"video must be the path of a video file or frame folder, got {video!r}")
    if "input_frames" not in obj:
        return VideoItem(item_id, path.parent / video, input_frames)
    given = obj["input_frames"]
    if isinstance(given, bool) or not isinstance(given, int):
        raise ValueError(f"input_frames must be an integer, got {given!r}")
    return VideoItem(item_id, path.parent / video, given, f"{path}:{number}: input_frames")


def conditioning_frames(pipe, item: VideoItem) -> np.ndarray:
    """The item's first `input_frames` frames, uint8 `[F, H, W, 3]`, read from its video (no
    further), refused in one line unless the model takes that many and the video holds that
    many of the model's frame size."""
    choices = pipe.input_frame_choices
    if item.input_frames not in choices:
        raise ValueError(f"{item.given_by} must be one of {', '.join(map(str, choices))} for this model, got {item.input_frames}")
    frames = read_video(item.video, item.input_frames)
    height, width = pipe.frame_size
    if frames.shape[1:3] != (height, width):
        raise ValueError(f"video {str(item.video)!r} has frames of {frames.shape[2]}x{frames.shape[1]} pixels; this model takes "
                         f"{width}x{height} (width x height): resize it first")
    if len(frames) < item.input_frames:
        raise ValueError(f"video {str(item.video)!r} has {len(frames)} frames, fewer than the {item.input_frames} conditioning "
                         f"frames asked for ({item.given_by})")
    return frames


def run_cosmos(pipe, args, config, fmt: str, sampling: dict, out_dir: Path, items: list[VideoItem]) -> None:
    """A CosmosPipeline's continuations: `--per-input` of `--input`, or one per batch line.
    Every video is read and checked before the run starts; each is read again when decoded,
    so that a batch never holds more than one video's frames."""
    config = pipe.check_decoding(config)
    check_scale(args.scale, pipe.num_frames, pipe.frame_size)
    per_input = 1 if args.per_input is None else args.per_input
    by_id, tasks = {}, []
    for item in items:
        frames = conditioning_frames(pipe, item)
        inputs = {"input_frames": item.input_frames, "frames_sha256": hashlib.sha256(frames.tobytes()).hexdigest()}
        new = ([RunItem(item.id, inputs, item_seed(args.seed, item.id))] if args.batch else
               [RunItem(f"{item.id}_{args.seed + i}", inputs, args.seed + i) for i in range(per_input)])
        tasks += new
        by_id.update((task.id, item) for task in new)

    def condition(task: RunItem) -> tuple[dict, dict]:
        item = by_id[task.id]
        return ({"video": conditioning_frames(pipe, item), "num_input_frames": item.input_frames},
                {"input": str(item.video)})

    settings = video_settings(pipe, args, config, pipe.num_frames, fmt, sampling)
    run_videos(pipe, args, settings, config, sampling, out_dir, tasks, condition)


# --- both families --------------------------------------------------------------------------


def frame_size(pipe) -> tuple[int, int]:
    """A frame's (height, width) in pixels: its token grid times the VQ's downsampling."""
    rows, cols = pipe.frame_grid
    return rows * pipe.vqvae.config.downsample, cols * pipe.vqvae.config.downsample


def check_scale(scale: int, frames: int, size: tuple[int, int]) -> int:
    """`scale`, refused in one line when `frames` frames of `size` (height, width) pixels,
    each pixel `scale` x `scale` times larger, would pass `MAX_FRAME_SIDE` or
    `MAX_VIDEO_BYTES` (RGB, one byte a channel): checked before any decoding."""
    h, w = size
    limit = max_video_scale(frames, h, w)
    if isinstance(scale, bool) or not isinstance(scale, int) or not 1 <= scale <= limit:
        raise ValueError(f"--scale must be a whole number from 1 to {limit} for {frames} frames of {w}x{h} pixels (at most "
                         f"{MAX_FRAME_SIDE} pixels a side and {MAX_VIDEO_BYTES // 2**30} GiB a video), got {scale!r}")
    return scale


def parse_class(text: str):
    """A class given on the command line: a label ("3") or a name ("circle right")."""
    return int(text) if text.strip().lstrip("-").isdigit() else text


def write_one(pipe, condition: dict, seed: int, config, sampling: dict, path: Path, scale: int):
    out = pipe(**condition, decoding=config, generator=torch.Generator().manual_seed(seed), **sampling)
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


def video_settings(pipe, args, config, frames: int, fmt: str, sampling: dict) -> dict:
    """What decides every video of a run besides its inputs."""
    return {"pipeline": recorded_pipeline(args.pipeline), "decoding": {"name": config.name, **dataclasses.asdict(config)},
            "frames": frames, "seed": args.seed, "format": fmt, "scale": args.scale,
            "sampling": {**pipe.default_sampling, **sampling}}


def run_videos(pipe, args, settings: dict, config, sampling: dict, out_dir: Path, tasks: list[RunItem],
               condition: Callable[[RunItem], tuple[dict, dict]], earlier: tuple[str, ...] = ()) -> None:
    """One video per task, as a resumable run: tasks whose record exists are skipped; a
    folder holding a run with other settings or inputs, or videos of the layout before
    runs were recorded (`earlier`), is refused until `--restart`. `condition(task)` gives
    the pipeline call's condition and the record's fields of the task's inputs."""
    if earlier and not args.restart:
        more = f" and {len(earlier) - 1} more" if len(earlier) > 1 else ""
        raise ValueError(f"{out_dir} holds videos written before runs were recorded ({earlier[0]}{more}), without a record of "
                         f"their settings; {RESTART}")
    video = f"videos/{{id}}.{settings['format']}"
    run = Run(out_dir, settings, tasks, outputs=(video,), earlier_layout=earlier, placement=placement(pipe)).start(args.restart)
    todo = run.todo()
    for task in todo:
        call, fields = condition(task)
        path = run.path(task, video)
        out = write_one(pipe, call, task.seed, config, sampling, path, args.scale)
        stats = out.stats[0]
        run.write_record(task, {**fields, "video": str(path.relative_to(out_dir)), "forward_passes": stats.forward_passes})
        print(f"wrote {path}: {stats.forward_passes} forwards for {stats.tokens_committed} tokens ({config.describe()})")
    manifest = run.write_manifest()
    print(f"wrote {len(todo)} videos ({len(tasks) - len(todo)} already done) {describe_placement(pipe)}; manifest: {manifest}")
