"""What `torch.inference_mode` saves the decoding loops against `torch.no_grad`, per call.

    PYTHONPATH=. python benchmarks/perf/inference_mode.py            # ~1 min

`mmspec.generate` runs under inference mode; its undecorated body (`generate.__wrapped__`)
runs here under `no_grad` instead. Shipped image model, 1 thread, batch 1: each sample is
decoded under both modes back to back (the order alternating), for AR and MC-SJD (window 16,
first drafts from above); seconds are the engine's decode (`DecodeStats.wall_time_s`).
Writes `benchmarks/results/inference_mode.{md,json}`.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from mmspec.decoding import generate as engine
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.runs.bench import dated_environment, write_results

METHODS = {"ar": DecodingConfig.from_name("ar"), "mc-sjd, window 16, from above": DecodingConfig.from_name("mc-sjd", window=16, init="above")}


def decode_seconds(pipe, config, seed: int, mode) -> tuple[float, int]:
    """Seconds and forwards of one image, `generate`'s body run under `mode`."""
    with mode():
        _, stats = engine.generate.__wrapped__(
            pipe.transformer, torch.tensor([seed % 10]), config, SamplingConfig(**pipe.default_sampling),
            torch.Generator().manual_seed(seed), layout=pipe.transformer.layout(token_embeddings=pipe.vqvae.codebook))
    return stats.wall_time_s, stats.forward_passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from mmspec.pipelines import load_pipeline

    pipe = load_pipeline("default")
    modes = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}
    rows = []
    for label, config in METHODS.items():
        for mode in modes.values():  # warm-up
            decode_seconds(pipe, config, 0, mode)
        seconds = {name: [] for name in modes}
        forwards = {name: [] for name in modes}
        for i in range(args.samples):
            order = list(modes) if i % 2 == 0 else list(reversed(modes))
            for name in order:
                s, f = decode_seconds(pipe, config, 1 + i, modes[name])
                seconds[name].append(s)
                forwards[name].append(f)
        ratios = [a / b for a, b in zip(seconds["no_grad"], seconds["inference_mode"])]
        rows.append({"method": label, **{f"{n}_s": statistics.mean(seconds[n]) for n in modes},
                     **{f"{n}_forwards": statistics.mean(forwards[n]) for n in modes},
                     "median_ratio": statistics.median(ratios)})
        print(f"{label}: no_grad {rows[-1]['no_grad_s']:.3f} s, inference_mode {rows[-1]['inference_mode_s']:.3f} s, "
              f"median ratio {rows[-1]['median_ratio']:.2f}", flush=True)
    env = dated_environment()
    lines = [f"# Inference mode against no_grad ({env['date']}, commit {env['commit']})", "",
             f"Shipped image model, 1 thread, batch 1, {args.samples} images per row, each decoded under both modes back "
             f"to back. Device: {env['device']}, torch {env['torch']}.", "",
             "| method | forwards | no_grad s | inference_mode s | x less time (median of pairs) |", "|---|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['inference_mode_forwards']:.1f} | {r['no_grad_s']:.3f} | {r['inference_mode_s']:.3f} | "
              f"{r['median_ratio']:.2f} |" for r in rows]
    write_results(args.out, "inference_mode", "\n".join(lines), {"environment": env, "rows": rows})


if __name__ == "__main__":
    main()
