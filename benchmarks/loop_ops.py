"""The Jacobi loop's own cost on the shipped image model: tensor operations per forward by
loop step, and the milliseconds of a forward against the loop's own per iteration.

    PYTHONPATH=. python benchmarks/loop_ops.py            # keyed and MC-SJD window 16 from above, auto; ~1 min

On a CPU the loop's time is set by how many small tensor operations it runs, not by their
size. Operations are counted with a `TorchFunctionMode` (every torch function and tensor
method called from mmspec's engine, views and indexing included; the model's forward is
left out) over one image; the time split comes from a second, uncounted run of
`--samples` images (1 thread, batch 1). Writes `benchmarks/results/loop_ops.{md,json}`.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time

import torch
from torch.overrides import TorchFunctionMode

from mmspec.runs.bench import dated_environment, write_results
from mmspec.decoding.loop import jacobi
from mmspec.decoding.config import DecodingConfig

ENGINE = ("/mmspec/decoding/", "/mmspec/kernels/", "/mmspec/core/")


class CountOps(TorchFunctionMode):
    """Counts torch calls whose nearest mmspec frame is in the engine, by function."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        frame = sys._getframe(1)
        while frame is not None:
            name = frame.f_code.co_filename
            if "/mmspec/models/" in name or "/mmspec/tokenizers/" in name:
                break
            if any(part in name for part in ENGINE):
                self.counts[f"{name.split('/mmspec/')[-1]}:{frame.f_code.co_name}"] += 1
                break
            frame = frame.f_back
        return func(*args, **(kwargs or {}))


def timed_forwards(monkey: list) -> None:
    """Wraps the loop's forward to sum its seconds into `monkey[0]`."""
    forward = jacobi.forward_steps

    def timed(*args, **kwargs):
        start = time.perf_counter()
        out = forward(*args, **kwargs)
        monkey[0] += time.perf_counter() - start
        return out

    jacobi.forward_steps = timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from mmspec.assets import DEFAULT_ASSETS
    from mmspec.pipelines import load_pipeline

    pipe = load_pipeline(DEFAULT_ASSETS)
    forward_s = [0.0]
    timed_forwards(forward_s)
    rows = []
    for label, config in (("keyed, window 16, from above", DecodingConfig.from_name("keyed", window=16, init="above")),
                          ("mc-sjd, window 16, from above", DecodingConfig.from_name("mc-sjd", window=16, init="above")),
                          ("auto", DecodingConfig.from_name("auto"))):
        decode = lambda i: pipe(class_labels=[i % 10], decoding=config, output_type="pt",
                                generator=torch.Generator().manual_seed(i)).stats[0]
        decode(0)  # warm-up (auto: its cost curve)
        with CountOps() as counter:
            counted = decode(1)
        forward_s[0], seconds, forwards = 0.0, 0.0, 0
        for i in range(args.samples):
            stats = decode(2 + i)
            seconds, forwards = seconds + stats.wall_time_s, forwards + stats.forward_passes
        by_step = collections.Counter()
        for key, n in counter.counts.items():
            by_step[key] += n / counted.forward_passes
        rows.append({"method": label, "ops_per_forward": sum(by_step.values()),
                     "by_function": dict(by_step.most_common(12)), "forwards": forwards / args.samples,
                     "ms_per_forward": 1000 * seconds / forwards, "forward_ms": 1000 * forward_s[0] / forwards})
        print(f"{label}: {rows[-1]['ops_per_forward']:.0f} ops, {rows[-1]['ms_per_forward']:.2f} ms a forward "
              f"({rows[-1]['forward_ms']:.2f} in the model)", flush=True)
    env = dated_environment()
    lines = [f"# The Jacobi loop's own cost ({env['date']}, commit {env['commit']})", "",
             f"Shipped image model, 1 thread, batch 1, {args.samples} images per row; operations counted over one image. "
             f"Device: {env['device']}, torch {env['torch']}.", "",
             "| method | engine ops per forward | ms per forward | of which the model | loop's own share |",
             "|---|---|---|---|---|"]
    for row in rows:
        share = 1 - row["forward_ms"] / row["ms_per_forward"]
        lines.append(f"| {row['method']} | {row['ops_per_forward']:.0f} | {row['ms_per_forward']:.2f} | "
                     f"{row['forward_ms']:.2f} | {share:.0%} |")
    lines += ["", "Operations per forward by function (the first row's method):", "", "| function | ops |", "|---|---|"]
    lines += [f"| `{name}` | {n:.1f} |" for name, n in rows[0]["by_function"].items()]
    write_results(args.out, "loop_ops", "\n".join(lines), {"environment": env, "rows": rows})


if __name__ == "__main__":
    main()
