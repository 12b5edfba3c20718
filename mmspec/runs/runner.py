"""One resumable run in one output folder: the contract of every batch verb (`batch`,
`speak --prompts`, `video`, `mesh`, `caption --out`).

    run.json            the run's settings (the dtype among them), the device it ran on,
                        the files each item writes, and every item (id, inputs, seed),
                        recorded before any work
    records/{id}.json   one record per finished item (with its device and dtype), written
                        after the item's files
    <outputs>           the item's files, named by the verb: `images/{id}.png`, ...
    manifest.jsonl      the records of the run's finished items, in the run's order

- Before any work, every file an item will write is checked to lie inside the folder, and
  the run is compared with the one the folder holds: other settings, or an item id given
  other inputs or another seed, are refused with the way out (`start(restart=True)`, the
  verbs' `--restart`, deletes the earlier results). A rerun may add items: the run is all
  of them, in the order they were first given. A recorded run that finished no item (it
  failed on its first) holds nothing to mix, and any run replaces it.
- An item is done when its record reads back whole and every one of its files exists; a
  record torn by a killed write is dropped and its item redone.
- Every file is written under a temporary name and renamed (`atomic_write`); a killed
  write's temporary file is deleted when its item is redone.

Example:
    >>> run = Run("out", {"seed": 0}, [RunItem("cat", {"prompt": "a cat"}, seed=1)],
    ...           outputs=("images/{id}.png",)).start()  # doctest: +SKIP
    >>> for item in run.todo():  # doctest: +SKIP
    ...     atomic_write(run.path(item, "images/{id}.png"), lambda tmp: image.save(tmp, format="PNG"))
    ...     run.write_record(item, {"file": "images/cat.png"})
    >>> run.write_manifest()  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from mmspec.core.bounds import json_value
from mmspec.io.files import TEMPORARY, atomic_write, check_writable
from mmspec.runs.paths import file_name, inside

logger = logging.getLogger(__name__)

RUN_FILE = "run.json"
RECORDS = "records"
MANIFEST = "manifest.jsonl"
RESTART = "choose a new output folder, or restart it (--restart deletes its results)"
# what an item's file may be called: `{id}` plus a suffix, at most one folder down
OUTPUT_PATTERN = re.compile(r"([A-Za-z0-9_-]+/)?\{id\}[A-Za-z0-9._-]*")
# the dtype of a run recorded before runs recorded theirs: every verb decoded in float32 then
EARLIER_DTYPE = "float32"


def as_json(value):
    """`value` as JSON reads it back (lists, not tuples; an object by its repr), so that a
    recorded run compares equal with the same run given again."""
    return json.loads(json.dumps(value, default=repr))


def sha256_of(path: str | Path) -> str:
    """The hex SHA-256 of a file's bytes: an image input is its content, not its name."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class RunItem:
    """One item of a run.

    Args:
        id (`str`): a plain file name (`mmspec.runs.paths.FILE_NAME`): it names the item's files.
        inputs (`dict`): what decides the item's result besides the run's settings: its
            prompt, its class, the SHA-256 of its image. Copied into its record.
        seed (`int`): the seed of its generator.
    """

    id: str
    inputs: dict
    seed: int

    def __post_init__(self):
        file_name(self.id, "item id")


def describe(inputs: dict) -> str:
    """Inputs in words: "class 3", "'a cat'", "image sha256 1f2e3d4c5b6a"."""
    words = []
    for key, value in inputs.items():
        if value is None:
            continue
        if key == "class_label":
            words.append(f"class {value}")
        elif key == "class":
            words.append(f"class {value!r}")
        elif key == "prompt":
            words.append(repr(value))
        elif key.endswith("sha256"):
            words.append(f"{key.replace('_', ' ')} {str(value)[:12]}")
        else:
            words.append(f"{key.replace('_', ' ')} {value!r}")
    return ", ".join(words) or "no inputs"


def read_run_file(out_dir: Path) -> dict | None:
    """The run recorded in `out_dir` (None when there is none), or a one-line ValueError
    naming the file when it cannot be read."""
    path = Path(out_dir) / RUN_FILE
    if not path.exists():
        return None
    try:
        recorded = json_value(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read {path}: {err}; {RESTART}") from None
    if not (isinstance(recorded, dict) and isinstance(recorded.get("settings"), dict) and isinstance(recorded.get("items"), list)
            and isinstance(recorded.get("outputs"), list) and all(isinstance(o, str) and OUTPUT_PATTERN.fullmatch(o) for o in recorded["outputs"])):
        raise ValueError(f"{path} is not a record of a run (settings, outputs, items); {RESTART}")
    return recorded


def recorded_items(recorded: dict, path: Path) -> list[RunItem]:
    try:
        return [RunItem(item["id"], item["inputs"], item["seed"]) for item in recorded["items"]]
    except (TypeError, KeyError, ValueError) as err:
        raise ValueError(f"{path} holds an item that is not a run item ({err}); {RESTART}") from None


def clear_run(out_dir: str | Path, outputs: tuple[str, ...] = (), extras: tuple[str, ...] = ()) -> None:
    """Deletes what a run wrote into `out_dir`: every recorded item's files (by the
    patterns of `run.json`, and by `outputs`) and record, and any temporary file of theirs,
    then `run.json`, the manifest and `extras`. Nothing else is touched."""
    out_dir = Path(out_dir)
    patterns = set(outputs)
    ids = {p.stem for p in (out_dir / RECORDS).glob("*.json")}
    try:
        recorded = read_run_file(out_dir)
    except ValueError:  # a damaged run file: its records still name the items
        recorded = None
    if recorded is not None:
        patterns |= set(recorded["outputs"])
        ids |= {item["id"] for item in recorded["items"] if isinstance(item, dict) and isinstance(item.get("id"), str)}
    names = {f"{RECORDS}/{i}.json" for i in ids} | {p.format(id=i) for i in ids for p in patterns}
    for relative in sorted(names):
        try:
            inside(out_dir, file_name_path(relative)).unlink(missing_ok=True)
        except ValueError:  # an id or a pattern that is no plain name: nothing of ours
            continue
    remove_temporary(out_dir, names)
    for name in (RUN_FILE, MANIFEST, *extras):
        (out_dir / name).unlink(missing_ok=True)


def file_name_path(relative: str) -> str:
    """`relative` ("images/cat.png") when each of its parts is a plain file name."""
    for part in relative.split("/"):
        file_name(part, "file")
    return relative


def remove_temporary(out_dir: Path, names: set[str]) -> None:
    """Deletes the temporary files a killed `atomic_write` left for any of `names`
    (paths relative to `out_dir`), scanning each folder once."""
    wanted: dict[Path, set[str]] = {}
    for relative in names:
        path = out_dir / relative
        wanted.setdefault(path.parent, set()).add(path.name)
    for folder, targets in wanted.items():
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            match = TEMPORARY.fullmatch(path.name)
            if match and match.group(1) in targets:
                path.unlink(missing_ok=True)


class Run:
    """A resumable run of `items` into `out_dir` under `settings`.

    Args:
        out_dir (`str` or `Path`): the run's folder.
        settings (`dict`): what decides every item's result besides its inputs (pipeline,
            decoding, sampling, seed, output format); compared as JSON.
        items (`list[RunItem]`): this invocation's items (ids unique).
        outputs (`tuple[str]`): the files each item writes, as patterns of its id
            ("images/{id}.png"); a record is written after them.
        extras (`tuple[str]`): files the run writes beside its items (a grid), deleted by a
            restart.
        earlier_layout (`tuple[str]`): files of an earlier layout of the verb's results: a
            folder holding one is refused (it records no run), and a restart deletes them.
        placement (`dict`): where the pipeline computes, `{"device": "cuda:0", "dtype":
            "bfloat16"}` (`mmspec.runs.placement.placement`). The dtype changes the tokens: it
            joins the settings, so a rerun in another is refused. The device does not: it is
            recorded in `run.json` (the device of the invocation that started the run last)
            and, with the dtype, in every record (the device that item was made on).
    """

    def __init__(self, out_dir: str | Path, settings: dict, items: list[RunItem], outputs: tuple[str, ...] = (),
                 extras: tuple[str, ...] = (), earlier_layout: tuple[str, ...] = (), placement: dict | None = None):
        self.out_dir = Path(out_dir)
        self.placement = as_json(dict(placement or {}))
        self.settings = as_json({**settings, **({"dtype": self.placement["dtype"]} if "dtype" in self.placement else {})})
        self.items = [dataclasses.replace(item, inputs=as_json(item.inputs)) for item in items]
        if not all(OUTPUT_PATTERN.fullmatch(p) for p in outputs):
            raise ValueError(f"output patterns must be '{{id}}' plus a suffix, at most one folder down, got {list(outputs)}")
        self.outputs = tuple(outputs)
        self.extras = (MANIFEST, *extras)
        self.earlier_layout = tuple(earlier_layout)
        self.run_items: list[RunItem] = []  # every item of the run, once started
        seen = set()
        for item in self.items:
            if item.id in seen:
                raise ValueError(f"item id {item.id!r} is given twice; ids name the output files")
            seen.add(item.id)

    # --- names -------------------------------------------------------------------------

    def output_names(self, item: RunItem) -> list[str]:
        return [pattern.format(id=item.id) for pattern in self.outputs]

    def record_name(self, item: RunItem) -> str:
        return f"{RECORDS}/{item.id}.json"

    def path(self, item: RunItem, pattern: str) -> Path:
        """The file `pattern` (one of `outputs`) names for `item`."""
        if pattern not in self.outputs:
            raise ValueError(f"{pattern!r} is not one of this run's outputs ({', '.join(self.outputs)})")
        return self.out_dir / pattern.format(id=item.id)

    # --- starting: every check before any work -----------------------------------------

    def start(self, restart: bool = False) -> "Run":
        """Checks the run before any work, then records it in `run.json`: every file
        inside the folder, a writable folder, and no earlier run there with other settings
        or another input or seed for one of the ids. `restart` first deletes the results
        of the run the folder holds. Returns the run."""
        for item in self.items:
            for relative in (self.record_name(item), *self.output_names(item)):
                inside(self.out_dir, relative)
        for name in (RUN_FILE, *self.extras, *self.earlier_layout):
            inside(self.out_dir, name)
        check_writable(self.out_dir)
        if restart:
            clear_run(self.out_dir, self.outputs, self.extras[1:] + self.earlier_layout)
        recorded = read_run_file(self.out_dir)
        if recorded is None:
            self.check_no_results()
            known = []
        else:
            known = recorded_items(recorded, self.out_dir / RUN_FILE)
            try:
                self.check_settings(recorded["settings"])
                self.check_items(known)
            except ValueError:
                if any((self.out_dir / RECORDS).glob("*.json")):
                    raise
                # the recorded run finished nothing (its first item failed): there is nothing to mix
                logger.info("%s holds a run that finished no item; this run replaces it", self.out_dir)
                known = []
        known_ids = {item.id for item in known}
        self.run_items = known + [item for item in self.items if item.id not in known_ids]
        self.out_dir.mkdir(parents=True, exist_ok=True)
        device = {"device": self.placement["device"]} if "device" in self.placement else {}
        run = {"settings": self.settings, **device, "outputs": list(self.outputs),
               "items": [dataclasses.asdict(i) for i in self.run_items]}
        atomic_write(self.out_dir / RUN_FILE, lambda tmp: tmp.write_text(json.dumps(run, indent=1) + "\n"))
        for folder in {RECORDS, *(p.split("/")[0] for p in self.outputs if "/" in p)}:
            (self.out_dir / folder).mkdir(exist_ok=True)
        return self

    def check_no_results(self) -> None:
        found = [name for name in (*self.extras, *self.earlier_layout) if (self.out_dir / name).exists()]
        if any((self.out_dir / RECORDS).glob("*.json")):
            found.insert(0, RECORDS)
        if found:
            raise ValueError(f"{self.out_dir} holds results without a record of their settings and inputs ({', '.join(found)}); "
                             f"{RESTART}")

    def check_settings(self, recorded: dict) -> None:
        if "dtype" in self.settings and "dtype" not in recorded:
            recorded = {**recorded, "dtype": EARLIER_DTYPE}
        keys = [*self.settings, *(k for k in recorded if k not in self.settings)]
        changed = [key for key in keys if recorded.get(key) != self.settings.get(key)]
        if changed:
            raise ValueError(f"{self.out_dir} holds a run with other {' and '.join(changed)} settings; choose a new output folder "
                             "to keep both, or restart it (--restart deletes its results)")

    def check_items(self, known: list[RunItem]) -> None:
        by_id = {item.id: item for item in known}
        for item in self.items:
            old = by_id.get(item.id)
            if old is None:
                continue
            if old.inputs != item.inputs:
                raise ValueError(f"item {item.id} of {self.out_dir} was generated for {describe(old.inputs)}, not for "
                                 f"{describe(item.inputs)}; {RESTART}")
            if old.seed != item.seed:
                raise ValueError(f"item {item.id} of {self.out_dir} was generated with seed {old.seed}, not {item.seed}; {RESTART}")

    # --- the work ------------------------------------------------------------------------

    def read_record(self, item: RunItem) -> dict | None:
        """The item's record, or None when it has none; a record that does not read back
        whole (a write torn by a kill) is deleted, so that the item is redone."""
        path = self.out_dir / self.record_name(item)
        if not path.exists():
            return None
        try:
            record = json_value(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            record = None
        if not isinstance(record, dict) or record.get("id") != item.id:
            logger.warning("%s is torn or not a record of item %s: dropped, the item is redone", path, item.id)
            path.unlink(missing_ok=True)
            return None
        return record

    def done(self, item: RunItem) -> bool:
        """The item has a whole record and every one of its files."""
        return self.read_record(item) is not None and all((self.out_dir / n).exists() for n in self.output_names(item))

    def todo(self, items: list[RunItem] | None = None) -> list[RunItem]:
        """Of `items` (default: this invocation's), those not done, in order; the temporary
        files a killed run left for them are deleted."""
        pending = [item for item in (self.items if items is None else items) if not self.done(item)]
        remove_temporary(self.out_dir, {n for item in pending for n in (self.record_name(item), *self.output_names(item))})
        return pending

    def write_record(self, item: RunItem, fields: dict) -> dict:
        """Writes the item's record (id, inputs, seed, then `fields`, then the run's device
        and dtype), atomically: the last write of an item, which marks it done. Returns the record."""
        record = {"id": item.id, **item.inputs, "seed": item.seed, **fields, **self.placement}
        atomic_write(self.out_dir / self.record_name(item), lambda tmp: tmp.write_text(json.dumps(record) + "\n"))
        return record

    def finished(self) -> list[tuple[RunItem, dict]]:
        """Every done item of the run (not only this invocation's) with its record, in the
        run's order."""
        pairs = []
        for item in self.run_items:
            record = self.read_record(item)
            if record is not None and all((self.out_dir / n).exists() for n in self.output_names(item)):
                pairs.append((item, record))
        return pairs

    def write_manifest(self) -> Path:
        """Writes the records of `finished()` to `manifest.jsonl`, atomically."""
        lines = [json.dumps(record) for _, record in self.finished()]
        manifest = self.out_dir / MANIFEST
        atomic_write(manifest, lambda tmp: tmp.write_text("".join(line + "\n" for line in lines)))
        return manifest


def recorded_run(out_dir: str | Path) -> Run:
    """The run `out_dir` holds, as recorded (its settings, outputs and items), to read or
    merge its records after the work is done, by however many processes."""
    out_dir = Path(out_dir)
    recorded = read_run_file(out_dir)
    if recorded is None:
        raise ValueError(f"{out_dir} holds no run ({RUN_FILE} is missing)")
    run = Run(out_dir, recorded["settings"], [], tuple(recorded["outputs"]))
    run.run_items = recorded_items(recorded, out_dir / RUN_FILE)
    return run
