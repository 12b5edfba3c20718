"""Resumable batch generation: one image per item, a JSONL manifest, any number of processes.

Each item gets its own seed derived from the base seed and its id, so its image does not
depend on how the work is sharded. The run keeps the contract of `mmspec.runs.runner`:
its settings and items are recorded in `run.json` before any work, and a rerun with other
settings, or that gives an id another prompt or class, is refused instead of mixing its
results with the earlier ones; every file is written to a temporary name and renamed; an
item whose record exists is skipped on a rerun, and a torn record is redone. Under
`accelerate launch`, process k of n takes items k, k+n, ...; the main process merges the
per-item records into `manifest.jsonl` when all are done.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mmspec.core.bounds import json_value, read_text_file
from mmspec.decoding.config import DecodingConfig
from mmspec.runs.paths import FILE_NAME, file_name
from mmspec.runs.placement import placement
from mmspec.io.files import atomic_write
from mmspec.runs.runner import Run, RunItem, clear_run, recorded_run

# an item id names its files (`images/{id}.png`, `records/{id}.json`): a plain file name,
# never a path, never hidden (temporary files are `.{id}.png.{pid}.tmp`), never a glob
ITEM_ID = FILE_NAME
IMAGE = "images/{id}.png"
# seeds are 63-bit: a torch.Generator takes up to 2**64 - 1, which leaves room for the
# `seed + i` of one seed per row or batch
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class Item:
    """One image to generate: its id (a safe file name) and its condition."""

    id: str
    prompt: str | None = None
    class_label: int | None = None

    def __post_init__(self):
        file_name(self.id, "item id")

    @property
    def condition(self) -> dict:
        """The pipeline-call keyword that conditions this item."""
        return dict(class_labels=[self.class_label]) if self.class_label is not None else dict(prompt=self.prompt)


def item_seed(base_seed: int, item_id: str) -> int:
    """A deterministic seed in [0, MAX_SEED] per item."""
    digest = hashlib.sha256(f"{base_seed}:{item_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


# an unknown class name's error lists at most this many of the known ones
LISTED_NAMES = 50


def known_classes(class_names: list[str]) -> str:
    """The known class names for an error line: all of them, or the first LISTED_NAMES and
    how many more."""
    listed = ", ".join(class_names[:LISTED_NAMES])
    more = len(class_names) - LISTED_NAMES
    return f"{listed} and {more} more" if more > 0 else listed


def parse_class_label(value, classes: int | list[str]) -> int:
    """An integer label from a JSON value or a text line: a label in [0, n), or a class
    name when `classes` is the pipeline's `class_names` (n is their number; an int gives n
    alone, and no names). Text of digits is a label, as in earlier runs; other text is
    looked up as a name, exactly. Never a float or a bool coerced to a label.

    A name and its label give the same int, so a run records the same input for either."""
    names = None if isinstance(classes, int) else list(classes)
    num_classes = classes if names is None else len(names)
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        value = int(value)
    elif isinstance(value, str) and names is not None:
        if value.strip() in names:
            return names.index(value.strip())
        raise ValueError(f"unknown class {value.strip()!r}; known classes: {known_classes(names)}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"class label {value!r} is not an integer")
    if not 0 <= value < num_classes:
        raise ValueError(f"class label {value} is not in [0, {num_classes})")
    return value


def json_item(line: str, number: int, example: str) -> tuple[str, dict]:
    """A JSONL line's object and its id (`id`, default the line number), refused in one line
    unless the line is a JSON object (`example` shows one)."""
    try:
        obj = json_value(line)
    except json.JSONDecodeError as err:  # a line nested 100,000 deep included
        raise ValueError(f"not valid JSON ({err.msg})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object such as {example}, got a {type(obj).__name__}")
    item_id = obj.get("id", f"{number:06d}")
    if isinstance(item_id, int) and not isinstance(item_id, bool):
        item_id = str(item_id)
    return item_id, obj


def parse_jsonl_line(line: str, number: int, classes: int | list[str] | None) -> Item:
    item_id, obj = json_item(line, number, '{"id": "cat", "prompt": "a cat"}')
    key = "prompt" if classes is None else "class_label"
    if key not in obj:
        raise ValueError(f"no {key!r}")
    if classes is not None:
        return Item(item_id, class_label=parse_class_label(obj[key], classes))
    if not isinstance(obj[key], str) or not obj[key].strip():
        raise ValueError(f"prompt must be a non-empty string, got {obj[key]!r}")
    return Item(item_id, prompt=obj[key])


def read_lines(path: str | Path, parse: Callable[[str, int], Any], what: str = "prompts file") -> list:
    """`parse(line, number)` of every non-empty line of `path` (an item with an `id`): a bad
    line is a one-line ValueError naming the file and the line, and so is an id seen before.
    The file is read in chunks up to `MAX_TEXT_FILE_BYTES` (`mmspec.core.bounds`): `/dev/zero`
    is refused in one line, not read until memory runs out."""
    path = Path(path)
    text = read_text_file(path, what)
    items, first_line = [], {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = parse(line, number)
        except ValueError as err:
            raise ValueError(f"{path}:{number}: {err}") from None
        if item.id in first_line:
            raise ValueError(f"{path}:{number}: item id {item.id!r} repeats line {first_line[item.id]}")
        first_line[item.id] = number
        items.append(item)
    if not items:
        raise ValueError(f"{what} {str(path)!r} has no items")
    return items


def read_items(path: str | Path, classes: int | list[str] | None, what: str = "prompts file") -> list[Item]:
    """Items of a text file (one prompt, or one class name or label, per non-empty line;
    ids are line numbers) or a JSONL file (objects with `prompt` or `class_label`, optional
    `id`). `classes` is a class pipeline's `class_names` (a name or a label per item) or
    its number of labels (labels only); None for a prompt pipeline. Names are resolved to
    labels here, so an item records the same class however it was given. A bad line, or
    an unknown name, is a one-line ValueError naming the file (as `what`) and the line."""

    def parse(line: str, number: int) -> Item:
        if Path(path).suffix == ".jsonl":
            return parse_jsonl_line(line, number, classes)
        if classes is not None:
            return Item(f"{number:06d}", class_label=parse_class_label(line, classes))
        return Item(f"{number:06d}", prompt=line.strip())

    return read_lines(path, parse, what)


def run_settings(pipe, decoding: DecodingConfig, seed: int, call_kwargs: dict, pipeline: str | None) -> dict:
    """What decides a batch's images besides the items: the pipeline, the decoding with
    every parameter, the sampling with the pipeline's defaults filled in, and the seed; as
    JSON reads them back (lists, not tuples; a drafter or schedule object by its repr), so
    that a recorded run compares equal."""
    settings = {
        "pipeline": pipeline or type(pipe).__name__,
        "decoding": {"name": decoding.name, **dataclasses.asdict(decoding)},
        "sampling": {**pipe.default_sampling, **call_kwargs},
        "seed": seed,
    }
    return json.loads(json.dumps(settings, default=repr))


def run_item(item: Item, seed: int) -> RunItem:
    """The item as a run item: its prompt or class is its input, its seed derives from the
    run's seed and its id."""
    return RunItem(item.id, {"prompt": item.prompt, "class_label": item.class_label}, item_seed(seed, item.id))


def clear_results(out_dir: str | Path) -> None:
    """Deletes what a batch wrote into `out_dir` (images named by records, records, the
    manifest, the run's record), so that the next run starts over. Nothing else is touched."""
    clear_run(out_dir, (IMAGE,))


def start_run(pipe, items: list[Item], out_dir: Path, decoding, seed: int, call_kwargs: dict | None,
              pipeline: str | None, outputs: tuple[str, ...] = (IMAGE,), restart: bool = False) -> tuple:
    """Checks a run before any work (the decoding, a writable folder holding no other run,
    no item id recorded for another condition or dtype), then records it in `out_dir`, with
    the pipeline's device and dtype. Returns the started `Run`, the checked decoding and a
    copy of `call_kwargs`."""
    decoding = pipe.check_decoding(decoding)
    call_kwargs = dict(call_kwargs or {})
    settings = run_settings(pipe, decoding, seed, call_kwargs, pipeline)
    run = Run(out_dir, settings, [run_item(item, seed) for item in items], outputs, placement=placement(pipe)).start(restart)
    return run, decoding, call_kwargs


def run_batch(
    pipe,
    items: list[Item],
    out_dir: str | Path,
    *,
    decoding: str | DecodingConfig = "auto",
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    call_kwargs: dict | None = None,
    pipeline: str | None = None,
    on_item: Callable[[Item, bool], None] | None = None,
) -> list[Item]:
    """Generates this process's share of `items` into `out_dir/images/{id}.png` with a
    record `out_dir/records/{id}.json`; returns the items it generated (not skipped).

    The run (`pipeline`, which names the pipeline, the decoding, the sampling `call_kwargs`,
    the seed, the pipeline's dtype and device, and every item's prompt or class) is
    recorded in `out_dir/run.json`; a folder
    holding a run with other settings, or an item id recorded for another condition, is
    refused before any work (`clear_results` starts it over). `on_item(item, skipped)`
    reports progress.
    """
    out_dir = Path(out_dir)
    run, decoding, call_kwargs = start_run(pipe, items, out_dir, decoding, seed, call_kwargs, pipeline)
    mine = [run_item(item, seed) for item in items[rank::world_size]]

    def generate(item: Item, task: RunItem, generator: torch.Generator) -> tuple[Path, object]:
        out = pipe(**item.condition, decoding=decoding, generator=generator, **call_kwargs)
        image_path = run.path(task, IMAGE)
        atomic_write(image_path, lambda p: out.images[0].save(p, format="PNG"))
        return image_path, out.stats[0]

    return decode_items(run, mine, items, decoding, generate, on_item)


def decode_items(run: Run, tasks: list[RunItem], items: list[Item], decoding: DecodingConfig,
                 generate: Callable[[Item, RunItem, torch.Generator], tuple[Path, object]],
                 on_item: Callable[[Item, bool], None] | None = None) -> list[Item]:
    """The loop every resumable verb shares: each of `tasks` not yet recorded is decoded by
    `generate(item, task, generator)` (the generator seeded by the task; it writes the output file and returns
    its path and `DecodeStats`), then recorded, which marks it done. `on_item(item, skipped)`
    reports progress. Returns the items generated (not skipped)."""
    todo = {task.id for task in run.todo(tasks)}
    by_id = {item.id: item for item in items}
    done = []
    for task in tasks:
        item = by_id[task.id]
        if task.id in todo:
            start = time.perf_counter()
            path, stats = generate(item, task, torch.Generator().manual_seed(task.seed))
            run.write_record(task, {"decoding": decoding.describe(), "file": str(path.relative_to(run.out_dir)),
                                    "stats": stats.to_dict(), "seconds": time.perf_counter() - start})
            done.append(item)
        if on_item:
            on_item(item, task.id not in todo)
    return done


def write_manifest(out_dir: str | Path, items: list[Item]) -> Path:
    """Checks that every item of `items` has a record, then merges the records of every
    finished item of the run (in the run's order) into `out_dir/manifest.jsonl`."""
    out_dir = Path(out_dir)
    for item in items:
        if not (out_dir / "records" / f"{item.id}.json").exists():
            raise ValueError(f"item {item.id} has no record in {out_dir}; rerun the batch to finish it")
    return recorded_run(out_dir).write_manifest()
