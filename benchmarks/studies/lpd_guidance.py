"""Chooses the shipped LPD model's guidance: class accuracy and feature-FID of lpd-20 samples
for each final CFG scale, with LPD's linear schedule and a constant one, at each sampling
temperature asked for.

Run it on a seed apart from the benchmark's (`benchmarks/lpd.py` uses seed 0), so that the
choice does not flatter the reported number. Writes `benchmarks/results/lpd_guidance.md`.

    PYTHONPATH=. python benchmarks/studies/lpd_guidance.py --seed 1     # ~3 min on 2 CPU threads
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from mmspec.assets import LPD_ASSETS

from mmspec.metrics.classifier import load_classifier
from mmspec.io.files import atomic_write
from mmspec.runs.bench import environment
from mmspec.datasets.shapes import load_split
from mmspec.metrics.quality import evaluate_images
from mmspec.pipelines import load_pipeline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[1.5, 2.0, 3.0, 4.0, 5.0], help="final CFG scales")
    parser.add_argument("--schedules", nargs="+", choices=("linear", "constant"), default=["linear", "constant"])
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0], help="sampling temperatures (default 1)")
    parser.add_argument("--pipeline", default=str(LPD_ASSETS), help="a saved LPD pipeline (default: the shipped one)")
    parser.add_argument("--steps", type=int, default=20, help="forwards per image (default 20)")
    parser.add_argument("--per-class", type=int, default=10, help="images per class (default 10)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/lpd_guidance.md")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    pipe = load_pipeline(args.pipeline)
    pipe.set_progress_bar_config(disable=True)
    classifier = load_classifier()
    labels = torch.arange(len(pipe.class_names)).repeat_interleave(args.per_class)
    real, _ = load_split("heldout", len(labels))
    lines = ["# lpd_guidance", "",
             f"LPD model {args.pipeline}, lpd-{args.steps}, {args.per_class} images x {len(pipe.class_names)} classes "
             f"per row (batches of one class, batch i seeded {args.seed} + i), default top-k/top-p.", "",
             "| guidance schedule | final scale | temperature | class_accuracy | feature_fid |", "|---|---|---|---|---|"]
    for schedule in args.schedules:
        for scale in args.scales:
            for temperature in args.temperatures:
                images = torch.cat([
                    pipe(chunk, num_inference_steps=args.steps, guidance_scale=scale, guidance_schedule=schedule,
                         temperature=temperature, generator=torch.Generator().manual_seed(args.seed + i),
                         output_type="pt").images * 2 - 1
                    for i, chunk in enumerate(labels.split(args.per_class))])
                q = evaluate_images(images, labels, real, classifier)
                lines.append(f"| {schedule} | {scale} | {temperature} | {q['class_accuracy']:.3f} | {q['feature_fid']:.2f} |")
                print(lines[-1], flush=True)
    meta = {"seed": args.seed, "date": time.strftime("%Y-%m-%d"), **environment()}
    lines += ["", "Run: " + ", ".join(f"{k}={v}" for k, v in meta.items())]
    atomic_write(Path(args.out), lambda p: Path(p).write_text("\n".join(lines) + "\n"))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
