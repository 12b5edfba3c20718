"""`mmspec mesh`: meshes from a mesh pipeline to .obj/.glb/.ply files and PNG previews.

    mmspec mesh --classes torus cone --per-class 2 --format glb obj --out-dir outputs/meshes
    mmspec mesh --items jobs.txt --out-dir outputs/mesh_batch     # a batch; rerun to resume

Mesh i of the run (classes in order, `--per-class` each, or the lines of `--items`) is
decoded alone with seed `--seed + i`, so it does not depend on the rest of the run. Each
mesh writes `<id>.<format>` for every `--format`, `<id>.png` (a preview) and a line of
`records.jsonl` (class, seed, forwards, seconds, faces, validity, any malformed-sequence
warning); a rerun skips the ids already recorded. `grid.png` shows every mesh of the run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

FORMATS = ("glb", "obj", "ply")


def add_parser(sub, add_pipeline, positive_int, seed_number) -> None:
    from mmspec.assets import MESH_ASSETS

    m = sub.add_parser("mesh", help="generate meshes (.glb/.obj/.ply + PNG previews) per class, or a resumable batch from a file")
    add_pipeline(m)
    m.set_defaults(pipeline=str(MESH_ASSETS))
    m.add_argument("--classes", nargs="*", help="class names or indices (default: every class)")
    m.add_argument("--per-class", type=positive_int, default=1, help="meshes per class (default 1)")
    m.add_argument("--items", help="batch file: one class name or index per line, or .jsonl objects with class and an optional id")
    m.add_argument("--decoding", default="auto", help="auto, ar, sjd, mc-sjd, each optionally +lookup or +face-lookup (default auto)")
    m.add_argument("--window", type=positive_int, default=16, help="Jacobi draft window (default 16)")
    m.add_argument("--temperature", type=float, help="sampling temperature, 0 = greedy (default: the pipeline's)")
    m.add_argument("--top-k", type=int, help="top-k filter, 0 = off (default: the pipeline's)")
    m.add_argument("--top-p", type=float, help="nucleus filter in (0, 1] (default: the pipeline's)")
    m.add_argument("--max-faces", type=positive_int, help="faces per mesh at most (default: the pipeline's)")
    m.add_argument("--seed", type=seed_number, default=0, help="seed of the first mesh; mesh i uses seed + i (default 0)")
    m.add_argument("--format", nargs="+", choices=FORMATS, default=["glb"], help="mesh file formats (default glb)")
    m.add_argument("--out-dir", default="outputs/meshes", help="output directory (default outputs/meshes)")


def read_items(path: str, class_names: list[str]) -> list[tuple[str, str]]:
    """(id, class name) per line of a text or .jsonl file; one-line errors naming the line."""
    items = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as err:
        raise ValueError(f"cannot read --items {path}: {err.strerror}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if path.endswith(".jsonl"):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{path} line {n} is not a JSON object") from None
            if not isinstance(record, dict) or "class" not in record:
                raise ValueError(f"{path} line {n} has no \"class\"")
            cls, item_id = str(record["class"]), str(record.get("id", f"{len(items):05d}"))
        else:
            cls, item_id = line.strip(), f"{len(items):05d}"
        items.append((item_id, class_name(cls, class_names)))
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
    from mmspec.batch import atomic_write, check_writable
    from mmspec.mesh_io import is_valid, preview_grid, render_preview, save_mesh
    from mmspec.pipelines.mesh import MeshPipeline, mesh_decoding
    from mmspec.pipelines.pipeline_utils import sampling_config

    sampling = {k: v for k, v in dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p).items() if v is not None}
    sampling_config({}, **sampling)
    config = mesh_decoding(args.decoding, args.window)
    out_dir = Path(args.out_dir)
    check_writable(out_dir)
    if args.threads:
        torch.set_num_threads(args.threads)
    pipe = MeshPipeline.from_pretrained(args.pipeline)
    pipe.set_progress_bar_config(disable=True)
    if pipe.class_names is None:
        raise ValueError("mmspec mesh runs class-conditional mesh models; this one is unconditional")
    if args.items:
        if args.classes:
            raise ValueError("give --classes or --items, not both")
        items = read_items(args.items, pipe.class_names)
    else:
        classes = [class_name(c, pipe.class_names) for c in (args.classes or pipe.class_names)]
        items = [(f"{c}_{k}", c) for c in classes for k in range(args.per_class)]
    out_dir.mkdir(parents=True, exist_ok=True)
    records_path = out_dir / "records.jsonl"
    done = {}
    if records_path.exists():
        done = {r["id"]: r for r in map(json.loads, records_path.read_text().splitlines())}
    meshes = []
    for i, (item_id, cls) in enumerate(items):
        if item_id in done:
            print(f"{item_id}: recorded by an earlier run, skipped")
            continue
        started = time.perf_counter()
        out = pipe(class_labels=cls, decoding=config, max_faces=args.max_faces,
                   generator=torch.Generator().manual_seed(args.seed + i), **sampling)
        seconds = time.perf_counter() - started
        mesh = out.meshes[0]
        for fmt in args.format:
            save_mesh(mesh, out_dir / f"{item_id}.{fmt}")
        render = render_preview(mesh)
        atomic_write(out_dir / f"{item_id}.png", lambda tmp: render.save(tmp, format="PNG"))
        record = {"id": item_id, "class": cls, "seed": args.seed + i, "decoding": config.describe(),
                  "forwards": out.stats[0].forward_passes, "seconds": round(seconds, 3), "faces": len(mesh.faces),
                  "valid": is_valid(mesh), "problem": out.problems[0]}
        with records_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        meshes.append((cls, mesh))
        print(f"{item_id}: {len(mesh.faces)} faces, {'valid' if record['valid'] else 'not watertight'}, "
              f"{record['forwards']} forwards, {seconds:.2f} s" + (f" ({record['problem']})" if record["problem"] else ""), flush=True)
    if meshes:
        grid = preview_grid([[m for _, m in meshes]], size=128)
        atomic_write(out_dir / "grid.png", lambda tmp: grid.save(tmp, format="PNG"))
    print(f"wrote {len(meshes)} mesh(es) to {out_dir} ({', '.join(args.format)} + png; records.jsonl)")
