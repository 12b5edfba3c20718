"""LPD's locality-aware order as a training-free schedule for the raster model: does it pay?

The shipped raster model (`mmspec/assets/default`) was trained to predict each cell from
the cells before it in raster order. Here it decodes in LPD's order instead, Jacobi-style:
every cell holds a draft (uniform random codes at first); each forward reads the whole
sequence of drafts and committed cells, refreshes every uncommitted draft from its
conditional, and commits the cells of the next group of the order. 20 and 32 steps use
LPD's group-size tables, 256 one cell a step; raster AR on the same (class, seed) list is
the baseline. Not exact: a cell is drawn while raster predecessors are still drafts.

Writes `benchmarks/results/lpd_order_raster.{md,json,png}`.

    PYTHONPATH=. python benchmarks/studies/lpd_order_raster.py          # ~6 min on one CPU thread
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from mmspec.assets import DEFAULT_ASSETS

from mmspec.metrics.classifier import load_classifier
from mmspec.runs.bench import MethodResult, environment, report, run_methods, score_images
from mmspec.core.contracts import GuidedLogits
from mmspec.core.sampling import SamplingConfig, sample, target_probs
from mmspec.datasets.shapes import load_split
from mmspec.decoding.orders import LocalityOrder
from mmspec.pipelines import load_pipeline

STEPS = (20, 32, 256)


@torch.no_grad()
def decode_in_order(gpt, label: int, order: LocalityOrder, sampling: SamplingConfig, generator: torch.Generator) -> torch.Tensor:
    """Codes `[1, T]` of one image decoded by `gpt` (raster-causal) in `order`, one forward a group."""
    T = order.grid_size**2
    cells = order.sample(1, generator)[0]
    tokens = torch.randint(gpt.config.vocab_size, (1, T), generator=generator)
    committed = torch.zeros(T, dtype=torch.bool)
    labels = torch.tensor([label, gpt.config.num_classes])  # the class and the null class, for CFG
    positions = torch.arange(T)[None]
    for group in order.groups():
        logits = gpt(tokens.expand(2, -1), labels)
        probs = target_probs(GuidedLogits(logits[:1], logits[1:]), positions, sampling)
        drawn = sample(probs, generator)
        tokens = torch.where(committed, tokens, drawn)
        committed[cells[group]] = True
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=5, help="images per class (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--out", default="benchmarks/results", help="output folder for the tables")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    raster = load_pipeline(DEFAULT_ASSETS)
    raster.set_progress_bar_config(disable=True)
    gpt, sampling = raster.transformer.eval(), SamplingConfig(**raster.default_sampling)
    labels = torch.arange(len(raster.class_names)).repeat_interleave(args.per_class)
    results = run_methods(raster, [{"class_labels": [int(c)]} for c in labels], ["ar"], seed=args.seed)
    for steps in STEPS:
        order = LocalityOrder.for_steps(steps, grid_size=raster.token_grid[0])
        started, codes = time.perf_counter(), []
        for i, c in enumerate(labels.tolist()):
            codes.append(decode_in_order(gpt, c, order, sampling, torch.Generator().manual_seed(args.seed + i)))
        seconds = time.perf_counter() - started
        images = raster.vqvae.decode(torch.cat(codes))
        results.append(MethodResult(f"locality order, {steps} steps", False, images, [steps] * len(labels), seconds))
    classifier, (real, _) = load_classifier(), load_split("heldout", len(labels))
    score_images(results, labels, real, classifier)
    meta = {
        "description": (f"The shipped raster model decoded in LPD's locality-aware order (Jacobi drafts for the cells not yet "
                        f"committed, one full forward per group) against its raster AR, {args.per_class} images x "
                        f"{len(raster.class_names)} classes, the same (class, seed) list, batch 1, sampling "
                        f"{raster.default_sampling}; torch on {args.threads} CPU thread(s)."),
        "seed": args.seed, "per_class": args.per_class, "date": time.strftime("%Y-%m-%d"), **environment(),
    }
    md, _, _ = report(results, Path(args.out), "lpd_order_raster", meta)
    print(md.read_text())


if __name__ == "__main__":
    main()
