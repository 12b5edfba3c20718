"""Forwards per image of MC-SJD or keyed settings (window, first drafts, branches) on the shipped model.

A quick sweep for choosing settings, forwards only (no quality columns): each setting
decodes the same (class, seed) list, one image per call, torch on one CPU thread. A
setting is `window,init,branches,branch_slots,branch_length`; branches 0 is plain MC-SJD
(`--method keyed`: keyed Jacobi, whose branches offer each slot's runners-up by perturbed score).
Prints one line per setting; the tables in docs come from `benchmarks/decoding_methods.py`.

    PYTHONPATH=. python benchmarks/studies/branch_settings.py 32,above,0,4,0 32,above,8,12,3
    PYTHONPATH=. python benchmarks/studies/branch_settings.py --per-class 1 16,above,0,4,0
    PYTHONPATH=. python benchmarks/studies/branch_settings.py --method keyed 32,above,8,12,3
"""

from __future__ import annotations

import argparse
import time

import torch

from mmspec.assets import DEFAULT_ASSETS
from mmspec.decoding.config import DecodingConfig
from mmspec.pipelines.llamagen import LlamaGenPipeline


def parse_setting(text: str, method: str = "mc-sjd") -> DecodingConfig:
    parts = text.split(",")
    if len(parts) != 5:
        raise SystemExit(f"a setting is window,init,branches,branch_slots,branch_length; got {text!r}")
    window, init, branches, slots, length = parts
    return DecodingConfig(method=method, window=int(window), init=init, branches=int(branches),
                          branch_slots=int(slots), branch_length=int(length))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="+", help="window,init,branches,branch_slots,branch_length")
    parser.add_argument("--per-class", type=int, default=2, help="images per class (default 2); seeds 100 * class + i")
    parser.add_argument("--method", choices=["mc-sjd", "keyed"], default="mc-sjd")
    args = parser.parse_args()
    torch.set_num_threads(1)
    configs = [parse_setting(s, args.method) for s in args.settings]
    pipe = LlamaGenPipeline.from_pretrained(DEFAULT_ASSETS)
    pipe.set_progress_bar_config(disable=True)
    for text, config in zip(args.settings, configs):
        forwards, start = [], time.perf_counter()
        for label in range(len(pipe.class_names)):
            for i in range(args.per_class):
                out = pipe(class_labels=[label], decoding=config, output_type="pt",
                           generator=torch.Generator().manual_seed(100 * label + i))
                forwards.append(out.stats[0].forward_passes)
        print(f"{args.method} {text}: {sum(forwards) / len(forwards):.2f} forwards per image over {len(forwards)} images, "
              f"{time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
