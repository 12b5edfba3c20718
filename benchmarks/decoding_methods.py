"""Every decoding method on the shipped model: forwards, wall time and quality, side by side.

    PYTHONPATH=. python benchmarks/decoding_methods.py                  # ~25 min on 1 CPU thread
    PYTHONPATH=. python benchmarks/decoding_methods.py --per-class 2    # a quick look

Each method decodes the same (class, seed) list, one image per call (batch 1: the latency
a user sees), with torch on one CPU thread. Reports per method: forward passes per image,
how many times fewer than AR, wall time and its ratio to AR, class accuracy (shipped
classifier) and feature-FID against the same number of held-out real images. Writes
`benchmarks/results/decoding_methods.{md,json,png}`.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import torch
from tqdm import tqdm

from mmspec.assets import DEFAULT_ASSETS

from mmspec.metrics.classifier import load_classifier
from mmspec.runs.bench import environment, report, run_methods
from mmspec.decoding.config import DecodingConfig
from mmspec.datasets.shapes import load_split
from mmspec.metrics.quality import evaluate_images
from mmspec.pipelines.llamagen import LlamaGenPipeline

# the papers' defaults (window 16, random first drafts, ZipAR window 8, LANTERN k=1000
# delta=0.1, GSD 7/0.15/0.5), then a few settings that suit this 16x16 model better, and
# the n-gram lookup drafter alone and before copies from the row above
METHODS = [
    "ar", "sjd", "mc-sjd", "sjd+lantern", "mc-sjd+lantern", "sjd+gsd", "mc-sjd+gsd",
    "zipar", "zipar+sjd", "zipar+mc-sjd", "zipar+mc-sjd+gsd",
]
TUNED = [
    DecodingConfig.from_name("mc-sjd", init="above"),
    DecodingConfig.from_name("mc-sjd+lantern", lantern_k=10, lantern_lambda=5.0),
    DecodingConfig.from_name("mc-sjd+gsd", init="above"),
    DecodingConfig.from_name("zipar+mc-sjd", zipar_window=4, init="above"),
    DecodingConfig.from_name("zipar+mc-sjd", zipar_window=2),
    DecodingConfig.from_name("mc-sjd", init="lookup"),
    DecodingConfig.from_name("mc-sjd", init="lookup+above"),
    # a longer window, then candidate branches at the leading slots (exact)
    DecodingConfig.from_name("mc-sjd", window=32, init="above"),
    DecodingConfig.from_name("mc-sjd", window=32, init="above", branches=4, branch_slots=4, branch_length=2),
    DecodingConfig.from_name("mc-sjd", window=32, init="above", branches=8, branch_slots=12, branch_length=3),
]
# with the shipped learned draft head (docs/draft-heads.md)
LEARNED = [
    DecodingConfig.from_name("mc-sjd", init="above"),
    DecodingConfig.from_name("mc-sjd", window=32, init="above"),
    DecodingConfig.from_name("keyed", window=32, init="above"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-class", type=int, default=10, help="images per class (default 10)")
    parser.add_argument("--methods", nargs="*", default=None,
                        help="decoding names or tuned rows by their table name, e.g. 'mc-sjd (init=above)' "
                             "(default: the papers' settings of every method, then the tuned rows)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    pipe = LlamaGenPipeline.from_pretrained(DEFAULT_ASSETS)
    pipe.set_progress_bar_config(disable=True)
    pipe.use_drafter = False  # rows draft with the shipped head only where they say so
    classifier = load_classifier()
    n_classes = len(pipe.class_names)
    labels = torch.arange(n_classes).repeat_interleave(args.per_class)
    conditions = [{"class_labels": [int(c)]} for c in labels]
    real, _ = load_split("heldout", len(labels))

    learned = [dataclasses.replace(config, head=pipe.drafter) for config in LEARNED] if pipe.drafter is not None else []
    tuned = {config.describe(): config for config in TUNED + learned}  # a tuned row by its table name
    methods = [tuned.get(m, m) for m in args.methods] if args.methods else [*METHODS, *TUNED, *learned]
    bar = tqdm(total=len(methods) * len(conditions), desc="benchmark", unit="img")
    results = []
    for method in methods:
        results += run_methods(pipe, conditions, [method], seed=args.seed,
                               on_progress=lambda name, done, total: bar.update(1))
        results[-1].quality = evaluate_images(results[-1].images, labels, real, classifier)
        bar.set_postfix(method=results[-1].method, acc=f"{results[-1].quality['class_accuracy']:.2f}")
    bar.close()
    meta = {
        "description": (
            f"Shipped model (mmspec/assets/default), {args.per_class} images x {n_classes} classes per method, batch 1, "
            f"default sampling {pipe.default_sampling}. Unless a row says otherwise: window 16, random first drafts, "
            f"ZipAR window 8, LANTERN k=1000 delta=0.1, GSD rank 7 / gap 0.15 / distance 0.5. Forwards include the "
            f"prefill; wall time covers decoding and VQ decoding, torch on {args.threads} CPU thread(s)."
        ),
        "seed": args.seed,
        "per_class": args.per_class,
        "date": time.strftime("%Y-%m-%d"),
        **environment(),
    }
    md, js, png = report(results, Path(args.out), "decoding_methods", meta)
    print(md.read_text())
    print(f"wrote {md}, {js}, {png}")


if __name__ == "__main__":
    main()
