"""What auto's own bookkeeping costs: auto with every part fixed against the same fixed setting.

    PYTHONPATH=. python benchmarks/studies/auto_bookkeeping.py      # ~1 min on 1 CPU thread

auto with its window and first drafts fixed and `cost="off"` makes the same choice at every
forward as the fixed MC-SJD setting, so the seconds between the two are auto's timing,
acceptance model and choices alone. Batch 1, 1 thread; the two alternate sample by sample
(order swapped every sample). Writes `benchmarks/results/auto_bookkeeping.{md,json}`.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from benchmarks.wall_time import CASES
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.drafts import Copy, FirstOf, Random
from mmspec.runs.bench import dated_environment, write_results

# the oracle's window of each model in the wall-time tables, with the first drafts auto picks there
SETTINGS = {"speech": dict(window=8, init="previous-step"), "mesh": dict(window=32, init=FirstOf((Copy("face"), Random())))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for model, fixed in SETTINGS.items():
        case = CASES[model]()
        pipe = case.load()
        if hasattr(pipe, "set_progress_bar_config"):
            pipe.set_progress_bar_config(disable=True)
        configs = {"fixed": DecodingConfig.from_name("mc-sjd", **fixed), "auto": DecodingConfig.from_name("auto", cost="off", **fixed)}
        for config in configs.values():  # warm-up
            case.decode(pipe, 0, 1, config, 0)
        seconds = {name: [] for name in configs}
        forwards = {name: [] for name in configs}
        for i in range(args.samples):
            for name in list(configs)[:: 1 if i % 2 == 0 else -1]:
                stats = case.decode(pipe, i, 1, configs[name], 100 + i)
                seconds[name].append(stats[0].wall_time_s)
                forwards[name].append(stats[0].forward_passes)
        rows.append({"model": model, "setting": configs["fixed"].describe(),
                     **{f"{n}_s": statistics.mean(seconds[n]) for n in configs},
                     **{f"{n}_forwards": statistics.mean(forwards[n]) for n in configs},
                     "ratio": sum(seconds["auto"]) / sum(seconds["fixed"])})
        print(f"{model}: auto {rows[-1]['auto_s']:.4f} s, fixed {rows[-1]['fixed_s']:.4f} s, {rows[-1]['ratio']:.3f}x", flush=True)
    env = dated_environment()
    lines = [f"# auto's own bookkeeping ({env['date']}, commit {env['commit']})", "",
             f"auto with every part fixed (`cost=\"off\"`, the same window and first drafts) beside that fixed setting, "
             f"batch 1, 1 thread, {args.samples} samples each, alternating. Device: {env['device']}, torch {env['torch']}.", "",
             "| model | setting | forwards (fixed / auto) | seconds (fixed / auto) | auto's time over fixed |", "|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['setting']} | {r['fixed_forwards']:.1f} / {r['auto_forwards']:.1f} | "
              f"{r['fixed_s']:.4f} / {r['auto_s']:.4f} | {r['ratio']:.3f} |" for r in rows]
    write_results(args.out, "auto_bookkeeping", "\n".join(lines), {"environment": env, "rows": rows})


if __name__ == "__main__":
    main()
