"""`mmspec caption`: captions of image files, printed, or written as a resumable batch.

A batch (`--out DIR`) is a run of `mmspec.runs.runner`: one record per image,
`records/{id}.json` (the image's file stem is its id), each through a temporary file and a
rename; images whose record exists are skipped, so an interrupted run continues where it
stopped. The run's settings (the dtype among them), its device and every image's SHA-256
are recorded in `run.json`; a folder holding a run with other settings, or an image of the
same name with other content, is refused (`--restart` clears it). The records are merged
into `manifest.jsonl`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from mmspec.assets import CAPTIONER_ASSETS
from mmspec.commands.common import add_device, load, positive_int, recorded_pipeline, seed_number, thread_count
from mmspec.runs.batch import item_seed
from mmspec.runs.paths import FILE_NAME
from mmspec.runs.placement import describe_placement, placement
from mmspec.io.files import check_writable
from mmspec.io.images import open_checked, read_rgb
from mmspec.runs.runner import Run, RunItem, sha256_of

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif")


@dataclass(frozen=True)
class ImageItem:
    """One image to caption: its id (the file stem, a plain file name) and its path."""

    id: str
    path: Path


def image_items(paths: list[str | Path]) -> list[ImageItem]:
    """Image files, with folders expanded to their image files (sorted by name); ids are
    file stems and must be unique. A missing path, a file that is no image or has more than
    `MAX_IMAGE_PIXELS` pixels (its header is read) or a repeated stem is a ValueError."""
    files = []
    for given in map(Path, paths):
        if given.is_dir():
            found = sorted(p for p in given.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith("."))
            if not found:
                raise ValueError(f"folder {str(given)!r} holds no image files ({', '.join(IMAGE_SUFFIXES)})")
            files += found
        elif given.is_file():
            files.append(given)
        else:
            raise ValueError(f"image {str(given)!r} does not exist")
    items, seen = [], {}
    for path in files:
        if not FILE_NAME.fullmatch(path.stem):
            raise ValueError(f"image {str(path)!r}: its name {path.stem!r} is not a plain file name (letters, digits, '-', '_', '.')")
        if path.stem in seen:
            raise ValueError(f"images {str(seen[path.stem])!r} and {str(path)!r} share the name {path.stem!r}; each needs its own")
        seen[path.stem] = path
        check_image_header(path)
        items.append(ImageItem(path.stem, path))
    return items


def check_image_header(path: Path) -> None:
    """Refuses, from its header alone, a file that is no image or one past the pixel cap of
    `mmspec.core.bounds` (a 30,000 x 30,000 PNG raised PIL's DecompressionBombError)."""
    with open_checked(path):
        pass


def caption_items(pipe, items: list[ImageItem], batch_size: int, seed: int, call_kwargs: dict) -> Iterator[tuple[list[ImageItem], object, float]]:
    """Captions `items` `batch_size` at a time; yields each chunk, the pipeline's output and
    its seconds. Each item's generator is seeded from `seed` and its id, so its caption does
    not depend on the chunk it falls in (a resumed run chunks the rest anew)."""
    for start in range(0, len(items), batch_size):
        chunk = items[start : start + batch_size]
        images = [read_rgb(item.path) for item in chunk]
        generator = [torch.Generator().manual_seed(item_seed(seed, item.id)) for item in chunk]
        began = time.perf_counter()
        out = pipe(images, generator=generator, **call_kwargs)
        yield chunk, out, time.perf_counter() - began


def run_caption_batch(
    pipe,
    items: list[ImageItem],
    out_dir: str | Path,
    *,
    batch_size: int = 8,
    seed: int = 0,
    call_kwargs: dict | None = None,
    pipeline: str | None = None,
    restart: bool = False,
    on_item: Callable[[ImageItem, bool], None] | None = None,
) -> Path:
    """Captions the items that have no record in `out_dir` yet; returns the manifest.

    Args:
        pipe (`CaptioningPipeline`): the captioner.
        items (`list[ImageItem]`): the images (`image_items`).
        out_dir: `records/{id}.json`, `run.json`, `manifest.jsonl` go here.
        batch_size (`int`): images per pipeline call.
        seed (`int`): seeds each call's generator (with the call's first id); every
            record names it.
        call_kwargs (`dict`): pipeline keywords (`prompt`, `decoding`, `max_new_tokens`,
            `do_sample`, `temperature`, `top_k`, `top_p`); recorded as the run's settings.
        pipeline (`str`): names the pipeline in the settings (its dtype joins them, its
            device is recorded: `mmspec.runs.runner.Run`'s `placement`).
        restart (`bool`): delete an earlier run's results in `out_dir` first.
        on_item: called `(item, skipped)` once per item.
    """
    call_kwargs = dict(call_kwargs or {})
    settings = {"pipeline": pipeline or type(pipe).__name__, "call": call_kwargs, "seed": seed, "batch_size": batch_size}
    # an image is its content: the same file name over another image is another input
    run = Run(out_dir, settings, [RunItem(item.id, {"image_sha256": sha256_of(item.path)}, seed) for item in items],
              placement=placement(pipe)).start(restart)
    tasks = {task.id: task for task in run.todo()}
    todo = []
    for item in items:
        if item.id in tasks:
            todo.append(item)
        elif on_item:
            on_item(item, True)
    for chunk, out, seconds in caption_items(pipe, todo, batch_size, seed, call_kwargs):
        for i, item in enumerate(chunk):
            run.write_record(tasks[item.id], {"image": str(item.path), "caption": out.text[i],
                                              "forward_passes": out.stats[i].forward_passes,
                                              "batch": len(chunk), "seconds": seconds})
            if on_item:
                on_item(item, False)
    return run.write_manifest()


def call_kwargs_from(args) -> dict:
    """The pipeline keywords of `mmspec caption`'s flags, checked before any loading."""
    from mmspec.pipelines.captioning import caption_decoding

    caption_decoding(args.decoding)
    filters = {k: v for k, v in dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p).items() if v is not None}
    if filters and not args.sample:
        raise ValueError(f"{', '.join('--' + k.replace('_', '-') for k in filters)} need --sample (greedy decoding ignores them)")
    if args.restart and not args.out:
        raise ValueError("--restart clears a batch folder: give it with --out")
    kwargs = {"decoding": args.decoding, "max_new_tokens": args.max_new_tokens, "do_sample": args.sample, **filters}
    return kwargs if args.prompt is None else {"prompt": args.prompt, **kwargs}


def caption_command(args) -> None:
    """`mmspec caption IMAGE...`: prints `file: caption` lines, or with `--out` runs a
    resumable batch. The pipeline loads after every flag and file is checked."""
    from tqdm import tqdm

    call_kwargs = call_kwargs_from(args)
    items = image_items(args.images)
    if args.out:
        check_writable(Path(args.out))
    pipe = load(args)
    pipe.check_generation(args.max_new_tokens, args.decoding, args.sample, args.temperature, args.top_k, args.top_p)
    pipe.set_progress_bar_config(disable=True)
    if not args.out:
        for chunk, out, seconds in caption_items(pipe, items, args.batch_size, args.seed, call_kwargs):
            for i, item in enumerate(chunk):
                print(f"{item.path}: {out.text[i]}", flush=True)
            forwards = max(s.forward_passes for s in out.stats)  # the batch runs until its longest caption is done
            print(f"({len(chunk)} image(s), {args.decoding}: {forwards} forward passes, {seconds:.2f} s {describe_placement(pipe)})")
        return
    bars, done_before = [], []  # the bar starts with the first item, after the run's checks: an error is a line of its own

    def progress(item: ImageItem, skipped: bool) -> None:
        if not bars:
            bars.append(tqdm(total=len(items), desc="caption", unit="img"))
        bars[0].update(1)
        if skipped:
            done_before.append(item)

    manifest = run_caption_batch(pipe, items, args.out, batch_size=args.batch_size, seed=args.seed, call_kwargs=call_kwargs,
                                 pipeline=recorded_pipeline(args.pipeline), restart=args.restart, on_item=progress)
    for bar in bars:
        bar.close()
    print(f"captioned {len(items) - len(done_before)} images ({len(done_before)} already done) {describe_placement(pipe)}; "
          f"manifest: {manifest}")


def add_parser(sub) -> None:
    c = sub.add_parser("caption", help="caption image files or folders of them; with --out, a resumable batch")
    c.add_argument("images", nargs="+", help="image files, or folders of them")
    c.add_argument("--pipeline", default=str(CAPTIONER_ASSETS),
                   help="saved captioning pipeline directory, or captioner (default: the shipped captioner)")
    c.add_argument("--threads", type=thread_count, help="torch CPU threads, 1 to the machine's cores (default: torch's choice)")
    add_device(c)
    c.add_argument("--prompt", help="the instruction after the image (default: the pipeline's)")
    c.add_argument("--decoding", default="auto",
                   help="auto, ar, sjd, mc-sjd, lookup, mc-sjd+lookup or prompt-lookup (default auto)")
    c.add_argument("--max-new-tokens", type=positive_int, default=64, help="tokens per caption at most (default 64)")
    c.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    c.add_argument("--temperature", type=float, help="sampling temperature (with --sample)")
    c.add_argument("--top-k", type=int, help="top-k filter, 0 = off (with --sample)")
    c.add_argument("--top-p", type=float, help="nucleus filter in (0, 1] (with --sample)")
    c.add_argument("--seed", type=seed_number, default=0, help="random seed, 0 to 2**63 - 1 (default 0)")
    c.add_argument("--batch-size", type=positive_int, default=8, help="images per forward batch (default 8)")
    c.add_argument("--out", help="output directory for a resumable batch: records/, run.json, manifest.jsonl")
    c.add_argument("--restart", action="store_true", help="with --out: delete an earlier run's results there and start over")
    c.set_defaults(run=caption_command)
