"""LPD beside the raster model: forwards, wall time, class accuracy and feature-FID.

The shipped LPD model (`mmspec/assets/lpd`) decodes in 20 and 32 forwards (and one cell per
forward, its own baseline); the shipped raster model (`mmspec/assets/default`) by AR,
MC-SJD and ZipAR + MC-SJD. Every row decodes the same (class, seed) list, one image per call
(batch 1), in one run with `torch.set_num_threads(1)`; ratios are against raster AR. Writes
`benchmarks/results/lpd.{md,json,png}`, a grid of samples per class
(`docs/lpd_samples.png`: raster AR beside LPD with 20 and 32 steps) and the commit-order
heatmaps (`docs/lpd_commit_order.png`).

    PYTHONPATH=. python benchmarks/lpd.py                   # ~10 min on one CPU thread
    PYTHONPATH=. python benchmarks/lpd.py --per-class 2     # a quick look
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from PIL import Image

from mmspec.assets import DEFAULT_ASSETS, LPD_ASSETS

from mmspec.metrics.classifier import load_classifier
from mmspec.io.files import atomic_write
from mmspec.runs.bench import environment, report, run_methods, score_images
from mmspec.datasets.shapes import load_split
from mmspec.decoding.config import DecodingConfig
from mmspec.io.images import commit_heatmap, image_grid, label_rows, to_pil
from mmspec.pipelines import load_pipeline

REPO = Path(__file__).resolve().parents[1]
RASTER = ["ar", "mc-sjd", DecodingConfig.from_name("mc-sjd", init="above"), DecodingConfig.from_name("zipar+mc-sjd", zipar_window=4)]
LPD = ["lpd-20", "lpd-32", "lpd-256"]


def sample_grid(results, labels: torch.Tensor, class_names: list[str], shown: list[str], per_class: int) -> Image.Image:
    """One row per class: `per_class` images of each method in `shown`, side by side."""
    by_name = {r.method: r for r in results}
    rows, names = [], []
    for c, name in enumerate(class_names):
        idx = (labels == c).nonzero()[:per_class, 0]
        rows += [img for method in shown for img in to_pil(by_name[method].images[idx])]
        names.append(name)
    return label_rows(image_grid(rows, cols=per_class * len(shown), scale=2), names)


def commit_orders(raster, lpd, seed: int) -> Image.Image:
    """Commit-order heatmaps of one image per method: raster AR, ZipAR + MC-SJD, LPD 20, LPD 32."""
    tiles = []
    for pipe, decoding in ((raster, "ar"), (raster, DecodingConfig.from_name("zipar+mc-sjd", zipar_window=4)),
                           (lpd, "lpd-20"), (lpd, "lpd-32")):
        out = pipe(class_labels=[0], decoding=decoding, generator=torch.Generator().manual_seed(seed), output_type="tokens")
        tiles.append(commit_heatmap(out.stats[0].commit_iteration[0], pipe.token_grid, size=192))
    return label_rows(image_grid(tiles, cols=4, pad=6), ["raster AR | ZipAR+MC-SJD | LPD 20 | LPD 32"], max_width=400)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=10, help="images per class (default 10)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--out", default="benchmarks/results", help="output folder for the tables")
    parser.add_argument("--docs", default=str(REPO / "docs"), help="output folder for the pictures")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    raster, lpd = load_pipeline(DEFAULT_ASSETS), load_pipeline(LPD_ASSETS)
    for pipe in (raster, lpd):
        pipe.set_progress_bar_config(disable=True)
    classifier = load_classifier()
    labels = torch.arange(len(raster.class_names)).repeat_interleave(args.per_class)
    conditions = [{"class_labels": [int(c)]} for c in labels]
    real, _ = load_split("heldout", len(labels))

    results = run_methods(raster, conditions, RASTER, seed=args.seed)
    lpd_results = run_methods(lpd, conditions, LPD, seed=args.seed)
    for r in lpd_results:
        r.method = f"LPD {r.method}"
    results += lpd_results
    score_images(results, labels, real, classifier)
    meta = {
        "description": (f"Shipped raster model (mmspec/assets/default) and shipped LPD model (mmspec/assets/lpd), "
                        f"{args.per_class} images x {len(raster.class_names)} classes per row, the same (class, seed) list, "
                        f"batch 1, each model's default sampling (raster {raster.default_sampling}, LPD {lpd.default_sampling}, "
                        f"LPD's guidance {lpd.guidance_schedule} along the order). Ratios against raster AR; torch on {args.threads} CPU thread(s)."),
        "seed": args.seed, "per_class": args.per_class, "date": time.strftime("%Y-%m-%d"), **environment(),
    }
    md, js, png = report(results, Path(args.out), "lpd", meta)
    print(md.read_text())
    docs = Path(args.docs)
    shown = min(args.per_class, 4)
    grid = sample_grid(results, labels, raster.class_names, ["ar", "LPD lpd-20", "LPD lpd-32"], shown)
    atomic_write(docs / "lpd_samples.png", lambda p: grid.save(p, format="PNG"))
    orders = commit_orders(raster, lpd, args.seed)
    atomic_write(docs / "lpd_commit_order.png", lambda p: orders.save(p, format="PNG"))
    print(f"wrote {md}, {js}, {png}, {docs / 'lpd_samples.png'}, {docs / 'lpd_commit_order.png'}")


if __name__ == "__main__":
    main()
