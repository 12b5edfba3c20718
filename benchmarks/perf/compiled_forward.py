"""Whether `torch.compile` makes the shipped image model's cached forward faster here.

    PYTHONPATH=. python benchmarks/perf/compiled_forward.py            # ~2 min on 2 cores

One forward of a live session (1 thread, one class label, CFG rows, 128 committed
positions) at n inputs per row, the sizes AR (n = 1) and Jacobi windows feed. Variants:
eager; every transformer block compiled (`nn.Module.compile(dynamic=True)`, the KV-cache
write inside the graph); only the blocks' feed-forward halves compiled (pure functions, no
cache write). Each variant has its own loaded pipeline and session, and their forwards
alternate (this machine is shared: noise hits all variants alike); times are medians of
`--reps` forwards after warm-up (compilation excluded), and the logits' largest difference
from eager is shown beside them. Writes `benchmarks/results/compiled_forward.{md,json}`.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from mmspec.runs.bench import dated_environment, write_results

SIZES = (1, 2, 5, 9, 17, 33)
COMMITTED = 128


def compile_blocks(model) -> None:
    for block in model.layers:
        block.compile(dynamic=True)


def compile_feed_forward(model) -> None:
    for block in model.layers:
        block.feed_forward.compile(dynamic=True)


VARIANTS = {"eager": None, "blocks compiled": compile_blocks, "feed-forward compiled": compile_feed_forward}


def live_session(model, n: int):
    """A session with COMMITTED positions done, and the inputs of an n-input forward after them."""
    session = model.start(torch.tensor([3]), guided=True, extra_positions=64)
    done = torch.arange(COMMITTED)[None]
    session.forward(torch.zeros_like(done), done)
    session.commit(done, torch.ones_like(done, dtype=torch.bool))
    return session, torch.zeros(1, n, dtype=torch.long), (COMMITTED + torch.arange(n))[None]


def timed(session, tokens, positions) -> float:
    start = time.perf_counter()
    session.forward(tokens, positions)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from mmspec.pipelines import load_pipeline

    torch._dynamo.config.recompile_limit = 64  # the blocks' layer index is a constant of each graph
    models = {}
    for name, prepare in VARIANTS.items():
        models[name] = load_pipeline("default").transformer.eval()
        if prepare is not None:
            prepare(models[name])
    rows = []
    with torch.inference_mode():
        for n in SIZES:
            runs = {name: live_session(model, n) for name, model in models.items()}
            logits = {name: s.forward(t, p).cond for name, (s, t, p) in runs.items()}  # compiles
            seconds = {name: [] for name in runs}
            for rep in range(3 + args.reps):
                for name in list(runs)[rep % len(runs):] + list(runs)[:rep % len(runs)]:
                    seconds[name].append(timed(*runs[name]))
            for name in runs:
                rows.append({"variant": name, "inputs": n, "ms": statistics.median(seconds[name][3:]) * 1e3,
                             "max_logit_diff": float((logits[name] - logits["eager"]).abs().max())})
            print(f"n={n}: " + ", ".join(f"{r['variant']} {r['ms']:.2f} ms" for r in rows if r["inputs"] == n), flush=True)
    env = dated_environment()
    eager = {r["inputs"]: r["ms"] for r in rows if r["variant"] == "eager"}
    lines = [f"# torch.compile and the cached forward ({env['date']}, commit {env['commit']})", "",
             f"Shipped image model, 1 thread, batch 1 with CFG rows, {COMMITTED} committed positions; median of "
             f"{args.reps} forwards after warm-up. Device: {env['device']}, torch {env['torch']}.", "",
             "| variant | " + " | ".join(f"n = {n}" for n in SIZES) + " | largest logit difference |",
             "|---|" + "---|" * (len(SIZES) + 1)]
    for name in VARIANTS:
        mine = [r for r in rows if r["variant"] == name]
        cells = [f"{r['ms']:.2f} ms" + ("" if name == "eager" else f" ({eager[r['inputs']] / r['ms']:.2f}x)") for r in mine]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {max(r['max_logit_diff'] for r in mine):.1e} |")
    write_results(args.out, "compiled_forward", "\n".join(lines), {"environment": env, "rows": rows})


if __name__ == "__main__":
    main()
