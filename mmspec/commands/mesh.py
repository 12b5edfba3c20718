"""`mmspec mesh`: meshes from a mesh pipeline to .obj/.glb/.ply files and PNG previews.

    mmspec mesh --classes torus cone --per-class 2 --format glb obj --out-dir outputs/meshes
    mmspec mesh --items jobs.txt --out-dir outputs/mesh_batch     # a batch; rerun to resume

Mesh i of the run (classes in order, `--per-class` each, or the lines of `--items`) is
decoded alone with seed `--seed + i`, so it does not depend on the rest of the run. Every
invocation is a run of `mmspec.runs.runner`: each mesh writes `meshes/<id>.<format>` for
every `--format`, `meshes/<id>.png` (a preview) and `records/<id>.json` (class, seed,
forwards, seconds, faces, validity, any malformed-sequence warning, device and dtype);
`run.json` records the settings (the dtype among them), the device and every mesh's class
and seed, so a rerun skips the meshes already done and refuses other settings or classes
until `--restart`. `grid.png` shows every mesh of the run, one labelled row per class, and
`manifest.jsonl` holds every record.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import torch

from mmspec.assets import MESH_ASSETS
from mmspec.commands.common import add_pipeline, load, positive_int, recorded_pipeline, seed_number
from mmspec.runs.paths import class_file_name, file_name
from mmspec.runs.placement import describe_placement, placement

from mmspec.io.files import atomic_write, check_writable

FORMATS = ("glb", "obj", "ply")
PREVIEW = "meshes/{id}.png"
GRID = "grid.png"
GRID_COLUMNS = 16  # previews a row of the grid at most; a class with more takes several rows
# the layout of results before runs were recorded: `records.jsonl` and `<id>.<format>` at the top
EARLIER_RECORDS = "records.jsonl"


def add_parser(sub) -> None:
    m = sub.add_parser("mesh", help="generate meshes (.glb/.obj/.ply + PNG previews) per class, or a resumable batch from a file")
    add_pipeline(m, MESH_ASSETS, "mesh")
    m.add_argument("--classes", nargs="*", help="class names or indices (default: every class)")
    m.add_argument("--per-class", type=positive_int, default=1, help="meshes per class (default 1)")
    m.add_argument("--items", help="batch file: one class name or index per line, or .jsonl objects with class and an optional id")
    m.add_argument("--decoding", default="auto", help="auto, ar, sjd, mc-sjd, each optionally +lookup or +face-lookup (default auto)")
    m.add_argument("--window", type=positive_int, help="Jacobi draft window (default 16; auto: chosen)")
    m.add_argument("--temperature", type=float, help="sampling temperature, 0 = greedy (default: the pipeline's)")
    m.add_argument("--top-k", type=int, help="top-k filter, 0 = off (default: the pipeline's)")
    m.add_argument("--top-p", type=float, help="nucleus filter in (0, 1] (default: the pipeline's)")
    m.add_argument("--max-faces", type=positive_int, help="faces per mesh at most (default: the pipeline's)")
    m.add_argument("--seed", type=seed_number, default=0, help="seed of the first mesh; mesh i uses seed + i (default 0)")
    m.add_argument("--format", nargs="+", choices=FORMATS, default=["glb"], help="mesh file formats (default glb)")
    m.add_argument("--out-dir", default="outputs/meshes", help="output directory (default outputs/meshes)")
    m.add_argument("--restart", action="store_true", help="delete an earlier run's results in --out-dir and start over")
    m.set_defaults(run=run)


def read_items(path: str, class_names: list[str]) -> list[tuple[str, str]]:
    """(id, class name) per line of a text or .jsonl file; one-line errors naming the line."""
    from mmspec.core.bounds import json_value, read_text_file

    items = []
    lines = read_text_file(path, "--items file").splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if path.endswith(".jsonl"):
            try:
                record = json_value(line)
            except json.JSONDecodeError:
                raise ValueError(f"{path} line {n} is not a JSON object") from None
            if not isinstance(record, dict) or "class" not in record:
                raise ValueError(f"{path} line {n} has no \"class\"")
            cls, item_id = str(record["class"]), str(record.get("id", f"{len(items):05d}"))
        else:
            cls, item_id = line.strip(), f"{len(items):05d}"
        items.append((file_name(item_id, f"{path} line {n}: item id"), class_name(cls, class_names)))
    if not items:
        raise ValueError(f"--items {path} holds no items")
    if len({i for i, _ in items}) != len(items):
        raise ValueError(f"--items {path} repeats an id; ids name the output files")
    return items


def class_name(value: str, class_names: list[str]) -> str:
    if value.isdigit() and int(value) < len(class_names):
        return class_names[int(value)]
    if value not in class_names:
        raise ValueError(f"unknown mesh class {value!r}; choose from {', '.join(class_names)}")
    return value


def run(args) -> None:
    """The verb: flags and output checked first, then the model, then the run (every file
    name, the bounds, the folder's earlier run), then one mesh at a time."""
    from mmspec.io.mesh import is_valid, render_preview, save_mesh
    from mmspec.pipelines.checks import sampling_config
    from mmspec.pipelines.mesh import check_max_faces, mesh_decoding
    from mmspec.runs.runner import Run, RunItem

    sampling = {k: v for k, v in dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p).items() if v is not None}
    sampling_config({}, **sampling)
    config = mesh_decoding(args.decoding, args.window)
    out_dir = Path(args.out_dir)
    check_writable(out_dir)
    pipe = load(args)
    pipe.set_progress_bar_config(disable=True)
    if pipe.class_names is None:
        raise ValueError("mmspec mesh runs class-conditional mesh models; this one is unconditional")
    faces = pipe.max_faces if args.max_faces is None else check_max_faces(args.max_faces, pipe.model)
    config = pipe.check_decoding(config, faces)  # the window, before run.json is written
    if args.items:
        if args.classes:
            raise ValueError("give --classes or --items, not both")
        items = read_items(args.items, pipe.class_names)
    else:
        limit = pipe.max_meshes_for(faces)
        if args.per_class > limit:
            raise ValueError(f"--per-class {args.per_class} is more than the {limit} meshes one call of this model may decode "
                             f"at {faces} faces (what its key-value cache budget holds); use --items for large runs")
        classes = [class_name(c, pipe.class_names) for c in (args.classes or pipe.class_names)]
        # class names come from the saved pipeline: they name files only once checked
        items = [(f"{class_file_name(c)}_{k}", c) for c in classes for k in range(args.per_class)]
    formats = list(dict.fromkeys(args.format))
    mesh_files = tuple(f"meshes/{{id}}.{fmt}" for fmt in formats)
    settings = {"pipeline": recorded_pipeline(args.pipeline), "decoding": {"name": config.name, **dataclasses.asdict(config)},
                "sampling": {**pipe.default_sampling, **sampling}, "max_faces": faces, "formats": formats, "seed": args.seed}
    tasks = [RunItem(item_id, {"class": cls}, args.seed + i) for i, (item_id, cls) in enumerate(items)]
    if args.restart:
        clear_earlier_layout(out_dir)
    run = Run(out_dir, settings, tasks, outputs=(*mesh_files, PREVIEW), extras=(GRID,),
              earlier_layout=(EARLIER_RECORDS,), placement=placement(pipe)).start(args.restart)
    todo = {task.id for task in run.todo()}
    written = 0
    for task in tasks:
        if task.id not in todo:
            print(f"{task.id}: recorded by an earlier run, skipped")
            continue
        started = time.perf_counter()
        out = pipe(class_labels=task.inputs["class"], decoding=config, max_faces=faces,
                   generator=torch.Generator().manual_seed(task.seed), **sampling)
        seconds = time.perf_counter() - started
        mesh = out.meshes[0]
        for pattern in mesh_files:
            save_mesh(mesh, run.path(task, pattern))
        render = render_preview(mesh)
        atomic_write(run.path(task, PREVIEW), lambda tmp: render.save(tmp, format="PNG"))
        record = run.write_record(task, {"decoding": config.describe(), "forwards": out.stats[0].forward_passes,
                                         "seconds": round(seconds, 3), "faces": len(mesh.faces), "valid": is_valid(mesh),
                                         "problem": out.problems[0]})
        written += 1
        print(f"{task.id}: {len(mesh.faces)} faces, {'valid' if record['valid'] else 'not watertight'}, "
              f"{record['forwards']} forwards, {seconds:.2f} s" + (f" ({record['problem']})" if record["problem"] else ""), flush=True)
    write_grid(run)
    run.write_manifest()
    print(f"wrote {written} mesh(es) to {out_dir} {describe_placement(pipe)} ({', '.join(formats)} + png in meshes/; records/, "
          f"{GRID}, manifest.jsonl)")


def write_grid(run) -> None:
    """`grid.png`: the preview of every finished mesh of the run (not only this
    invocation's), one labelled row per class in the run's order, `GRID_COLUMNS` at most a row."""
    from PIL import Image

    from mmspec.io.images import image_grid, label_rows

    by_class: dict[str, list] = {}
    for item, _ in run.finished():
        with Image.open(run.path(item, PREVIEW)) as preview:
            by_class.setdefault(item.inputs["class"], []).append(preview.convert("RGB").resize((128, 128), Image.LANCZOS))
    if not by_class:
        return
    rows = [(name, tiles[i : i + GRID_COLUMNS]) for name, tiles in by_class.items() for i in range(0, len(tiles), GRID_COLUMNS)]
    cols = max(len(tiles) for _, tiles in rows)
    blank = Image.new("RGB", (128, 128), "white")
    grid = image_grid([tiles[i] if i < len(tiles) else blank for _, tiles in rows for i in range(cols)], cols)
    grid = label_rows(grid, [name for name, _ in rows])
    atomic_write(run.out_dir / GRID, lambda tmp: grid.save(tmp, format="PNG"))


def clear_earlier_layout(out_dir: Path) -> None:
    """Deletes the results of the layout before runs were recorded: `records.jsonl` (a torn
    last line, left by a killed append, is skipped), the files its ids name at the top of
    `out_dir`, and the grid."""
    path = out_dir / EARLIER_RECORDS
    if not path.exists():
        return
    for line in path.read_text(errors="replace").splitlines():
        try:
            item_id = json.loads(line).get("id")
            file_name(item_id, "item id")
        except (json.JSONDecodeError, AttributeError, ValueError):
            continue  # a torn line, or an id that names no file of ours
        for suffix in (*FORMATS, "png"):
            (out_dir / f"{item_id}.{suffix}").unlink(missing_ok=True)
    path.unlink()
    (out_dir / GRID).unlink(missing_ok=True)
