"""Resumable batch generation: one image per item, a JSONL manifest, any number of processes.

Each item gets its own seed derived from the base seed and its id, so its image does not
depend on how the work is sharded. Every result is written to a temporary name and
renamed (an interrupted run leaves only whole files); an item whose record exists is
skipped on a rerun. Under `accelerate launch`, process k of n takes items k, k+n, ...;
the main process merges the per-item records into `manifest.jsonl` when all are done.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class Item:
    id: str
    prompt: str | None = None
    class_label: int | None = None


def item_seed(base_seed: int, item_id: str) -> int:
    """A deterministic 63-bit seed per item."""
    digest = hashlib.sha256(f"{base_seed}:{item_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def read_items(path: str | Path, class_conditional: bool) -> list[Item]:
    """Items of a text file (one prompt or class label per non-empty line; ids are line
    numbers) or a JSONL file (objects with `prompt` or `class_label`, optional `id`)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"cannot read prompts file {str(path)!r}: {err.strerror if isinstance(err, OSError) else err}") from None
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if path.suffix == ".jsonl":
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{path}:{number}: not a JSON object") from None
            item_id = str(obj.get("id", f"{number:06d}"))
            value = obj.get("class_label" if class_conditional else "prompt")
        else:
            item_id, value = f"{number:06d}", line.strip()
        if value is None:
            raise ValueError(f"{path}:{number}: no {'class_label' if class_conditional else 'prompt'}")
        if class_conditional:
            try:
                items.append(Item(item_id, class_label=int(value)))
            except ValueError:
                raise ValueError(f"{path}:{number}: class label {value!r} is not an integer") from None
        else:
            items.append(Item(item_id, prompt=str(value)))
    if not items:
        raise ValueError(f"prompts file {str(path)!r} has no items")
    ids = [it.id for it in items]
    if len(set(ids)) != len(ids):
        raise ValueError(f"prompts file {str(path)!r} repeats item ids")
    return items


def check_writable(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"output directory {str(out_dir)!r} is not writable: {err.strerror}") from None


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)


def run_batch(
    pipe,
    items: list[Item],
    out_dir: str | Path,
    *,
    decoding: str = "mc-sjd",
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    call_kwargs: dict | None = None,
    on_item: Callable[[Item, bool], None] | None = None,
) -> list[Item]:
    """Generates this process's share of `items` into `out_dir/images/{id}.png` with a
    record `out_dir/records/{id}.json`; returns the items it generated (not skipped).
    `on_item(item, skipped)` reports progress."""
    out_dir = Path(out_dir)
    check_writable(out_dir)
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
        condition = dict(class_labels=[item.class_label]) if item.class_label is not None else dict(prompt=item.prompt)
        out = pipe(**condition, decoding=decoding, generator=torch.Generator().manual_seed(s), **(call_kwargs or {}))
        image_path = images / f"{item.id}.png"
        atomic_write(image_path, lambda p: out.images[0].save(p, format="PNG"))
        record = {
            "id": item.id,
            "prompt": item.prompt,
            "class_label": item.class_label,
            "seed": s,
            "decoding": decoding,
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
