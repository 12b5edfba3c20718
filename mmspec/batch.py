"""Resumable batch generation: one image per item, a JSONL manifest, any number of processes.

Each item gets its own seed derived from the base seed and its id, so its image does not
depend on how the work is sharded. Every result is written to a temporary name and
renamed (an interrupted run leaves only whole files); an item whose record exists is
skipped on a rerun. The output folder records the run's settings (`settings.json`): a rerun
with other settings is refused instead of mixing its results with the earlier ones. Under
`accelerate launch`, process k of n takes items k, k+n, ...; the main process merges the
per-item records into `manifest.jsonl` when all are done.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from mmspec.decoding.config import DecodingConfig

# an item id names its files (`images/{id}.png`, `records/{id}.json`): a plain file name,
# never a path, never hidden (temporary files are `.{id}.png.{pid}.tmp`), never a glob
ITEM_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
SETTINGS_FILE = "settings.json"
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
        if not isinstance(self.id, str) or not ITEM_ID.fullmatch(self.id):
            raise ValueError(f"item id {self.id!r} is not a plain file name: use 1 to 128 letters, digits, '-', '_' "
                             "or '.', not starting with '.'")

    @property
    def condition(self) -> dict:
        """The pipeline-call keyword that conditions this item."""
        return dict(class_labels=[self.class_label]) if self.class_label is not None else dict(prompt=self.prompt)


def item_seed(base_seed: int, item_id: str) -> int:
    """A deterministic seed in [0, MAX_SEED] per item."""
    digest = hashlib.sha256(f"{base_seed}:{item_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def parse_class_label(value, num_classes: int) -> int:
    """An integer label in [0, num_classes) from a JSON value or a text line; never a
    float or a bool coerced to one."""
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"class label {value!r} is not an integer")
    if not 0 <= value < num_classes:
        raise ValueError(f"class label {value} is not in [0, {num_classes})")
    return value


def parse_jsonl_line(line: str, number: int, num_classes: int | None) -> Item:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        raise ValueError("not valid JSON") from None
    if not isinstance(obj, dict):
        raise ValueError(f'expected a JSON object such as {{"id": "cat", "prompt": "a cat"}}, got a {type(obj).__name__}')
    item_id = obj.get("id", f"{number:06d}")
    if isinstance(item_id, int) and not isinstance(item_id, bool):
        item_id = str(item_id)
    key = "prompt" if num_classes is None else "class_label"
    if key not in obj:
        raise ValueError(f"no {key!r}")
    if num_classes is not None:
        return Item(item_id, class_label=parse_class_label(obj[key], num_classes))
    if not isinstance(obj[key], str) or not obj[key].strip():
        raise ValueError(f"prompt must be a non-empty string, got {obj[key]!r}")
    return Item(item_id, prompt=obj[key])


def read_items(path: str | Path, num_classes: int | None) -> list[Item]:
    """Items of a text file (one prompt or class label per non-empty line; ids are line
    numbers) or a JSONL file (objects with `prompt` or `class_label`, optional `id`).
    `num_classes` is the class pipeline's number of labels, None for a prompt pipeline.
    A bad line is a one-line ValueError naming the file and the line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read prompts file {str(path)!r}: {err.strerror if isinstance(err, OSError) else err}") from None
    items, first_line = [], {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            if path.suffix == ".jsonl":
                item = parse_jsonl_line(line, number, num_classes)
            elif num_classes is not None:
                item = Item(f"{number:06d}", class_label=parse_class_label(line, num_classes))
            else:
                item = Item(f"{number:06d}", prompt=line.strip())
        except ValueError as err:
            raise ValueError(f"{path}:{number}: {err}") from None
        if item.id in first_line:
            raise ValueError(f"{path}:{number}: item id {item.id!r} repeats line {first_line[item.id]}")
        first_line[item.id] = number
        items.append(item)
    if not items:
        raise ValueError(f"prompts file {str(path)!r} has no items")
    return items


def check_writable(out_dir: Path) -> None:
    """Proves that `out_dir` can be created (if missing) and written, creating nothing: a
    file is written and deleted in its nearest existing ancestor."""
    existing = next(p for p in (out_dir, *out_dir.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise ValueError(f"output directory {str(out_dir)!r} is not writable: {existing} is a file")
    try:
        probe = existing / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"output directory {str(out_dir)!r} is not writable: {err.strerror}") from None


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """`write(tmp)` then renames tmp to `path`: readers see the old file or the whole new
    one. The temporary file never outlives a failure."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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


def check_settings(out_dir: Path, settings: dict) -> None:
    """Refuses an output folder that holds the results of a run with other settings, or of
    a run that recorded none."""
    path = out_dir / SETTINGS_FILE
    if not path.exists():
        if any((out_dir / "records").glob("*.json")):
            raise ValueError(f"{out_dir} holds results without a record of their settings; choose a new output folder, "
                             "or restart it (--restart deletes its results)")
        return
    try:
        recorded = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read {path}: {err}") from None
    changed = [key for key in settings if recorded.get(key) != settings[key]]
    if changed:
        raise ValueError(f"{out_dir} holds a run with other {' and '.join(changed)} settings; choose a new output folder "
                         "to keep both, or restart it (--restart deletes its results)")


def condition_name(prompt: str | None, class_label: int | None) -> str:
    return repr(prompt) if prompt is not None else f"class {class_label}"


def check_items_match_records(out_dir: Path, items: list[Item]) -> None:
    """Refuses items whose id already has a record for another condition (the same id with
    another prompt or class would be skipped as done, and its old image kept)."""
    for item in items:
        path = out_dir / "records" / f"{item.id}.json"
        if not path.exists():
            continue
        record = json.loads(path.read_text())
        if (record["prompt"], record["class_label"]) != (item.prompt, item.class_label):
            raise ValueError(f"item {item.id} of {out_dir} was generated for {condition_name(record['prompt'], record['class_label'])}, "
                             f"not for {condition_name(item.prompt, item.class_label)}; choose a new output folder, "
                             "or restart it (--restart deletes its results)")


def clear_results(out_dir: str | Path) -> None:
    """Deletes what a batch wrote into `out_dir` (images named by records, records, the
    manifest, the settings), so that the next run starts over. Nothing else is touched."""
    out_dir = Path(out_dir)
    for record in (out_dir / "records").glob("*.json"):
        (out_dir / "images" / f"{record.stem}.png").unlink(missing_ok=True)
        record.unlink()
    for name in ("manifest.jsonl", SETTINGS_FILE):
        (out_dir / name).unlink(missing_ok=True)


def start_run(pipe, items: list[Item], out_dir: Path, decoding, seed: int, call_kwargs: dict | None,
              pipeline: str | None) -> tuple:
    """Checks a run before any work (the decoding, a writable folder holding no other run,
    no item id recorded for another condition), then records its settings in `out_dir`.
    Returns the checked decoding and a copy of `call_kwargs`."""
    decoding = pipe.check_decoding(decoding)
    call_kwargs = dict(call_kwargs or {})
    settings = run_settings(pipe, decoding, seed, call_kwargs, pipeline)
    check_writable(out_dir)
    check_settings(out_dir, settings)
    check_items_match_records(out_dir, items)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / SETTINGS_FILE, lambda p: p.write_text(json.dumps(settings, indent=2) + "\n"))
    return decoding, call_kwargs


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

    The run's settings (`pipeline`, which names the pipeline, decoding, sampling `call_kwargs`
    and seed) are recorded in `out_dir/settings.json`; a folder holding another run's results,
    or an item id recorded for another condition, is refused before any work
    (`clear_results` starts it over). `on_item(item, skipped)`
    reports progress.
    """
    out_dir = Path(out_dir)
    decoding, call_kwargs = start_run(pipe, items, out_dir, decoding, seed, call_kwargs, pipeline)
    images, records = out_dir / "images", out_dir / "records"
    images.mkdir(exist_ok=True)
    records.mkdir(exist_ok=True)
    done = []
    for item in items[rank::world_size]:
        record_path = records / f"{item.id}.json"
        if record_path.exists() and (images / f"{item.id}.png").exists():
            if on_item:
                on_item(item, True)
            continue
        for stale in (*images.glob(f".{item.id}.png.*.tmp"), *records.glob(f".{item.id}.json.*.tmp")):
            stale.unlink()  # left by a run killed while writing this item
        s = item_seed(seed, item.id)
        start = time.perf_counter()
        out = pipe(**item.condition, decoding=decoding, generator=torch.Generator().manual_seed(s), **call_kwargs)
        image_path = images / f"{item.id}.png"
        atomic_write(image_path, lambda p: out.images[0].save(p, format="PNG"))
        record = {
            "id": item.id,
            "prompt": item.prompt,
            "class_label": item.class_label,
            "seed": s,
            "decoding": decoding.describe(),
            "file": str(image_path.relative_to(out_dir)),
            "stats": out.stats[0].to_dict(),
            "seconds": time.perf_counter() - start,
        }
        atomic_write(record_path, lambda p: p.write_text(json.dumps(record) + "\n"))
        done.append(item)
        if on_item:
            on_item(item, False)
    return done


def write_manifest(out_dir: str | Path, items: list[Item]) -> Path:
    """Merges the records of `items` (in their order) into `out_dir/manifest.jsonl`."""
    out_dir = Path(out_dir)
    lines = []
    for item in items:
        path = out_dir / "records" / f"{item.id}.json"
        if not path.exists():
            raise ValueError(f"item {item.id} has no record in {out_dir}; rerun the batch to finish it")
        lines.append(path.read_text().strip())
    manifest = out_dir / "manifest.jsonl"
    atomic_write(manifest, lambda p: p.write_text("\n".join(lines) + "\n"))
    return manifest
