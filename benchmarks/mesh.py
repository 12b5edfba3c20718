"""Mesh decoding on the shipped mesh model: forwards, wall time, validity and class accuracy.

    PYTHONPATH=. python benchmarks/mesh.py                   # 5 meshes per class, ~15 min on 1 CPU thread
    PYTHONPATH=. python benchmarks/mesh.py --per-class 1     # a quick look

Each method decodes the same (class, seed) list, one mesh per call (batch 1), with torch on
one CPU thread and the shipped sampling (temperature 0.5). Reports per method: forward passes
per mesh, how many times fewer than AR, wall time and its ratio to AR, the share of valid
meshes (watertight, no zero-area face), class accuracy (shipped point-cloud classifier)
and faces per mesh. Writes `benchmarks/results/mesh.{md,json,png}` and preview grids of
the AR and mc-sjd+lookup meshes (`docs/mesh_ar.png`, `docs/mesh_mc-sjd+lookup.png`).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from tqdm import tqdm

from mmspec.runs.bench import MethodResult, environment, report
from mmspec.datasets.meshes import load_split
from mmspec.io.mesh import is_valid, preview_grid
from mmspec.pipelines.mesh import MESH_ASSETS, MeshPipeline, mesh_decoding

METHODS = ["ar", "sjd", "mc-sjd", "lookup", "mc-sjd+lookup", "mc-sjd+face-lookup"]
GRID_METHODS = ("ar", "mc-sjd+lookup")  # methods whose meshes are drawn, one row per class
WINDOWS: dict[str, tuple[int, ...]] = {}  # methods also run at other draft windows, e.g. {"mc-sjd+lookup": (16, 32)}


def run(pipe: MeshPipeline, name: str, window: int, labels: list[int], seed: int, bar) -> tuple[MethodResult, list]:
    config = mesh_decoding(name, window)
    meshes, forwards, faces = [], [], []
    start = time.perf_counter()
    for i, label in enumerate(labels):
        out = pipe(class_labels=[label], decoding=config, generator=torch.Generator().manual_seed(seed + i))
        meshes += out.meshes
        forwards.append(out.stats[0].forward_passes)
        faces.append(len(out.meshes[0].faces))
        bar.update(1)
    wall = time.perf_counter() - start
    predicted = pipe.classifier.classify(meshes, torch.Generator().manual_seed(seed))
    quality = {
        "valid": sum(map(is_valid, meshes)) / len(meshes),
        "class_accuracy": float((predicted == torch.tensor(labels)).float().mean()),
        "faces_per_mesh": sum(faces) / len(faces),
    }
    label = name if window == 16 else f"{name} (window={window})"
    return MethodResult(label, config.exact, torch.empty(0), forwards, wall, quality), meshes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=5, help="meshes per class (default 5)")
    parser.add_argument("--methods", nargs="*", default=METHODS, help=f"default: {' '.join(METHODS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", default="benchmarks/results")
    parser.add_argument("--grid", default="docs/mesh_{method}.png", help="preview grids of AR and mc-sjd+lookup ('' for none)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    pipe = MeshPipeline.from_pretrained(MESH_ASSETS)
    pipe.set_progress_bar_config(disable=True)
    n = len(pipe.class_names)
    labels = [c for c in range(n) for _ in range(args.per_class)]
    runs = [(m, w) for m in args.methods for w in WINDOWS.get(m, (16,))]
    bar = tqdm(total=len(runs) * len(labels), desc="mesh bench", unit="mesh")
    results, meshes = zip(*[run(pipe, m, w, labels, args.seed, bar) for m, w in runs])
    bar.close()
    for (method, window), made in zip(runs, meshes):
        if args.grid and method in GRID_METHODS and window == 16:
            rows = [made[c * args.per_class : (c + 1) * args.per_class] for c in range(n)]
            path = Path(args.grid.format(method=method))
            path.parent.mkdir(parents=True, exist_ok=True)
            preview_grid(rows, pipe.class_names, size=112).save(path)
    real, real_labels = load_split("heldout", 25 * n)
    real_accuracy = float((pipe.classifier.classify(real, torch.Generator().manual_seed(args.seed)) == torch.tensor(real_labels)).float().mean())
    meta = {"classifier_accuracy_on_heldout_dataset_meshes": round(real_accuracy, 4), "description": f"shipped mesh model ({MESH_ASSETS.name}): {n} classes x {args.per_class} meshes, batch 1, "
                           f"temperature {pipe.default_sampling['temperature']}, max {pipe.max_faces} faces",
            "seed": args.seed, **environment()}
    md, _, _ = report(list(results), Path(args.out_dir), "mesh", meta)
    print(md.read_text())


if __name__ == "__main__":
    main()
