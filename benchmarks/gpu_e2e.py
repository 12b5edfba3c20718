"""The engine's cost at LlamaGen sizes: forwards, the loop around them, the verify kernel.

    PYTHONPATH=. python benchmarks/gpu_e2e.py                       # a GPU: B, L, XL
    PYTHONPATH=. python benchmarks/gpu_e2e.py --device cpu --sizes B --batches 1 8 --windows 16
                                                                    # the CPU loop profile (one thread)

LlamaGen-B / L / XL class-to-image configs (V = 16384, 16x16 tokens) with random weights
(timing does not depend on them), bf16 on a GPU, float32 on CPU, CFG on (2B cache rows).
1. forward: ms per forward of n inputs per sequence (a window of n - 1 drafts and its
   predecessor), 128 positions committed before them, at each batch size.
2. loop: one keyed and one MC-SJD decode (window 16, top-k 2000, CFG 4) of `--loop-tokens`
   positions per batch, each named phase of the loop timed: the model forward, and what surrounds it
   (first drafts, packing, the verification transform and kernel, commits), as ms per
   iteration and as a share of the forward. Random weights accept few drafts, so
   iterations hold about one window per sequence: the loop's cost per iteration is what a
   trained model pays too.
3. auto: what `decoding="auto"` measures and chooses here: its cost curve (each size
   relative to one input, at the batch's cache rows), the windows it picked, and one
   decode of `--loop-tokens` positions by AR, keyed and MC-SJD at `--loop-window` and
   auto, in seconds (random weights: acceptance is low, so the choice leans to short
   windows), and whether keyed and auto gave AR's tokens (bfloat16 near-ties may flip);
   keyed again with a learned draft head of random weights: the head's cost per forward.
4. verify (CUDA): the Triton kernels (probabilistic and keyed) against their PyTorch
   references at LlamaGen sizes, via `gpu_verify_check.py`.
Writes benchmarks/results/gpu_e2e[_cpu].{md,json} with the device and versions. Stops
adding rows once `--budget` seconds are spent.
"""

from __future__ import annotations

import argparse
import json
import platform
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from mmspec.core.sampling import SamplingConfig  # noqa: E402
from mmspec.core.noise import Noise  # noqa: E402
from mmspec.decoding.config import DecodingConfig  # noqa: E402
from mmspec.decoding.auto import describe_choices  # noqa: E402
from mmspec.decoding.generate import generate  # noqa: E402
from mmspec.decoding.loop.jacobi import JacobiLoop, extra_positions  # noqa: E402
from mmspec.decoding.loop.stopping import Stopping  # noqa: E402
from mmspec.models.networks.draft_head import DraftHead  # noqa: E402
from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT  # noqa: E402

RESULTS = Path(__file__).parent / "results"
SIZES = {  # LlamaGen's GPT-B, L and XL; "tiny" for a smoke run
    "tiny": dict(dim=64, n_layer=2, n_head=4),
    "B": dict(dim=768, n_layer=12, n_head=12),
    "L": dict(dim=1024, n_layer=24, n_head=16),
    "XL": dict(dim=1280, n_layer=36, n_head=20),
}
COMMITTED = 128  # positions decoded before the timed forwards: mid-image
SAMPLING = SamplingConfig(guidance_scale=4.0, top_k=2000)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: str):
    """(result, seconds) of `fn()`, the device synchronised around it."""
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - start


def build(size: str, device: str) -> LlamaGenGPT:
    torch.manual_seed(0)
    config = LlamaGenConfig(**SIZES[size], vocab_size=16384, block_size=256, num_classes=1000, class_dropout_prob=0.1)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    return LlamaGenGPT(config).to(device=device, dtype=dtype).eval()


@torch.no_grad()
def forward_ms(model: LlamaGenGPT, batch: int, n: int, device: str, repeats: int) -> float:
    """Median ms of a forward of `n` inputs per sequence after `COMMITTED` committed positions."""
    labels = torch.arange(batch, device=device) % 1000
    session = model.start(labels, guided=True, extra_positions=n)
    V = model.config.vocab_size
    history = torch.randint(V, (batch, COMMITTED), device=device)
    positions = torch.arange(COMMITTED, device=device).expand(batch, -1)
    session.forward(history, positions)
    session.commit(positions, torch.ones_like(positions, dtype=torch.bool))
    tokens = torch.randint(V, (batch, n), device=device)
    window = COMMITTED + torch.arange(n, device=device).expand(batch, -1)
    session.forward(tokens, window)  # warm-up
    return 1000 * statistics.median(timed(lambda: session.forward(tokens, window), device)[1] for _ in range(repeats))


@torch.no_grad()
def loop_profile(model: LlamaGenGPT, batch: int, window: int, positions: int, device: str, method: str = "mc-sjd") -> dict:
    """ms per iteration of each phase of one decode (`method`: keyed or MC-SJD) of `positions` positions."""
    config = DecodingConfig(method=method, window=window)
    layout = model.layout().truncate(positions)
    labels = torch.arange(batch, device=device) % 1000
    session = model.start(labels, guided=True, extra_positions=extra_positions(layout, config))
    inner, spent = session.forward, {"forward": 0.0}

    def forward(*args, **kwargs):
        out, seconds = timed(lambda: inner(*args, **kwargs), device)
        spent["forward"] += seconds
        return out

    session.forward = forward
    noise = Noise.from_generator(torch.Generator(device=device).manual_seed(0), batch, device)
    loop = JacobiLoop(session, layout, SAMPLING, config, noise, Stopping.none(batch, layout.length, device))
    loop.prefill()
    phases = {"open_windows (first drafts)": 0.0, "pack_inputs": 0.0, "forward_and_verify": 0.0, "commit_and_slide": 0.0}
    iterations = 0
    while not bool(loop.stopping.done(loop.committed).all()):
        live, seconds = timed(loop.open_windows, device)
        phases["open_windows (first drafts)"] += seconds
        inputs, seconds = timed(lambda: loop.pack_inputs(live), device)
        phases["pack_inputs"] += seconds
        verified, seconds = timed(lambda: loop.forward_and_verify(inputs, live), device)
        phases["forward_and_verify"] += seconds
        _, seconds = timed(lambda: loop.commit_and_slide(inputs, *verified), device)
        phases["commit_and_slide"] += seconds
        iterations += 1
    phases["verify (transform + kernel + slot gathers)"] = phases.pop("forward_and_verify") - spent["forward"]
    outside = sum(phases.values())
    row = dict(method=method, batch=batch, window=window, positions=positions, iterations=iterations,
               forward_ms=1000 * spent["forward"] / iterations, outside_ms=1000 * outside / iterations,
               outside_share=outside / spent["forward"])
    row.update({f"{name} ms": 1000 * s / iterations for name, s in phases.items()})
    return row


@torch.no_grad()
def auto_row(model: LlamaGenGPT, batch: int, window: int, positions: int, device: str) -> dict:
    """auto's measured curve and choices, and the wall time of AR, MC-SJD and auto on one decode."""
    layout = model.layout().truncate(positions)
    labels = torch.arange(batch, device=device) % 1000
    row, tokens = dict(batch=batch, positions=positions), {}
    head = DraftHead.for_target(model).to(device, model.output.weight.dtype)  # random weights: its cost, not its hits
    for name, config in (("ar", "ar"), ("keyed", DecodingConfig(method="keyed", window=window)),
                         ("keyed_head", DecodingConfig(method="keyed", window=window, head=head)),
                         ("mc-sjd", DecodingConfig(method="mc-sjd", window=window)), ("auto", "auto")):
        tokens[name], stats = generate(model, labels, config, SAMPLING, torch.Generator(device=device).manual_seed(0), layout=layout)
        row[f"{name}_s"], row[f"{name}_forwards"] = stats.wall_time_s, stats.forward_passes
        if name == "auto":
            row["cost_curve"] = {str(k): v for k, v in stats.cost_curve.items()}
            row["choices"] = describe_choices(stats.choices)
    row["keyed_as_ar"], row["auto_as_ar"] = (bool(torch.equal(tokens[name], tokens["ar"])) for name in ("keyed", "auto"))
    # the head's own cost per forward: the two keyed decodes differ by it (and by its drafts' hits)
    row["head_ms_per_forward"] = 1e3 * (row["keyed_head_s"] / row["keyed_head_forwards"] - row["keyed_s"] / row["keyed_forwards"])
    return row


def verify_rows(budget_s: float) -> tuple[list[dict], list[dict]]:
    """The probabilistic and the keyed kernels' rows of `gpu_verify_check.py`, LlamaGen sizes."""
    from gpu_verify_check import CASES, KEYED_CASES, run_case, run_keyed_case

    generator = torch.Generator(device="cuda").manual_seed(0)
    start, rows, keyed = time.perf_counter(), [], []
    plan = [(c, run_case, rows) for c in CASES if c.model == "LlamaGen"]
    plan += [(c, run_keyed_case, keyed) for c in KEYED_CASES if c.model == "LlamaGen"]
    for case, run, into in plan:
        if time.perf_counter() - start > budget_s:
            break
        into.append(run(case, generator))
    return rows, keyed


def markdown(result: dict) -> str:
    meta = result["meta"]
    lines = [f"# Engine cost at LlamaGen sizes on {meta['device']}", "",
             f"torch {meta['torch']}, {meta['dtype']}, threads {meta['threads']}, CFG 4, top-k 2000, "
             f"{COMMITTED} positions committed before each timed forward", "",
             "## ms per forward (n inputs per sequence)", "",
             "| size | batch | " + " | ".join(f"n={n}" for n in result["windows"]) + " |",
             "|---|---|" + "---|" * len(result["windows"])]
    for r in result["forward"]:
        lines.append(f"| {r['size']} | {r['batch']} | " + " | ".join(f"{r[str(n)]:.1f}" for n in result["windows"]) + " |")
    if result["loop"]:
        names = [k for k in result["loop"][0] if k.endswith(" ms") and k not in ("forward_ms", "outside_ms")]
        lines += ["", "## The loop around the forward (ms per iteration)", "",
                  "| size | method | batch | window | iterations | forward | outside | outside / forward | " + " | ".join(n[:-3] for n in names) + " |",
                  "|---|---|---|---|---|---|---|---|" + "---|" * len(names)]
        for r in result["loop"]:
            lines.append(f"| {r['size']} | {r['method']} | {r['batch']} | {r['window']} | {r['iterations']} | {r['forward_ms']:.1f} | "
                         f"{r['outside_ms']:.1f} | {100 * r['outside_share']:.1f}% | " + " | ".join(f"{r[n]:.2f}" for n in names) + " |")
    if result["auto"]:
        sizes = list(result["auto"][0]["cost_curve"])
        lines += ["", "## auto: the measured cost curve (relative to one input per row) and one decode", "",
                  "| size | batch | " + " | ".join(f"n={n}" for n in sizes) + " | AR s | keyed s | keyed + head s | head ms / forward "
                  "| MC-SJD s | auto s | auto chose | keyed, auto = AR's tokens |",
                  "|---|---|" + "---|" * (len(sizes) + 8)]
        for r in result["auto"]:
            curve = " | ".join(f"{r['cost_curve'].get(n, float('nan')):.2f}" for n in sizes)
            lines.append(f"| {r['size']} | {r['batch']} | {curve} | {r['ar_s']:.2f} | {r['keyed_s']:.2f} | {r['keyed_head_s']:.2f} | "
                         f"{r['head_ms_per_forward']:.2f} | {r['mc-sjd_s']:.2f} | "
                         f"{r['auto_s']:.2f} | {r['choices']} | {r['keyed_as_ar']}, {r['auto_as_ar']} |")
    if result["verify"]:
        lines += ["", "## Verification: Triton vs PyTorch reference (LlamaGen V = 16384)", "",
                  "| batch | L | rule | transform | reference ms | triton ms | same-p decisions |", "|---|---|---|---|---|---|---|"]
        for r in result["verify"]:
            lines.append(f"| {r['batch']} | {r['L']} | {r['rule']} | {r['transform']} | {r['reference_ms']:.2f} | "
                         f"{r['triton_ms']:.2f} | {'identical' if r['same_p_decisions_identical'] else 'DIFFERENT'} |")
    if result.get("keyed_verify"):
        lines += ["", "## Keyed verification: Triton vs PyTorch reference (LlamaGen V = 16384)", "",
                  "| batch | L | transform | reference ms | triton ms | winners agreeing | windows agreeing |", "|---|---|---|---|---|---|---|"]
        for r in result["keyed_verify"]:
            lines.append(f"| {r['batch']} | {r['L']} | {r['transform']} | {r['reference_ms']:.2f} | {r['triton_ms']:.2f} | "
                         f"{r['winners_agreeing']:.4f} | {r['windows_agreeing']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    parser.add_argument("--sizes", nargs="+", default=["B", "L", "XL"], choices=list(SIZES))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    parser.add_argument("--windows", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64], help="inputs per sequence")
    parser.add_argument("--loop-window", type=int, default=16)
    parser.add_argument("--loop-tokens", type=int, default=64, help="positions decoded per loop profile")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=420.0, help="seconds; later rows are skipped")
    parser.add_argument("--out", type=Path, default=None, help="results stem (default benchmarks/results/gpu_e2e[_cpu])")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_e2e: no CUDA device; run with --device cpu for the CPU profile")
        return 2
    if args.device == "cpu":
        torch.set_num_threads(1)
    os.environ["MMSPEC_CACHE_DIR"] = tempfile.mkdtemp(prefix="mmspec-gpu-e2e-")  # auto measures this device's curve afresh
    out = args.out or RESULTS / ("gpu_e2e" if args.device == "cuda" else "gpu_e2e_cpu")
    meta = dict(device=torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu",
                torch=torch.__version__, dtype="bf16" if args.device == "cuda" else "float32",
                threads=torch.get_num_threads(), python=platform.python_version())
    result = dict(meta=meta, windows=args.windows, forward=[], loop=[], auto=[], verify=[], keyed_verify=[])
    start = time.perf_counter()
    over = lambda: time.perf_counter() - start > args.budget
    for size in args.sizes:
        model = build(size, args.device)
        for batch in args.batches:
            if over():
                break
            row = dict(size=size, batch=batch)
            row.update({str(n): forward_ms(model, batch, n, args.device, args.repeats) for n in args.windows})
            result["forward"].append(row)
            print(json.dumps(row), flush=True)
        for part, measure in (("loop", lambda *a: loop_profile(*a, method="keyed")), ("loop", loop_profile), ("auto", auto_row)):
            for batch in args.batches:
                if over():
                    break
                row = dict(size=size, **measure(model, batch, args.loop_window, args.loop_tokens, args.device))
                result[part].append(row)
                print(json.dumps(row), flush=True)
        del model
    if args.device == "cuda" and not over():
        result["verify"], result["keyed_verify"] = verify_rows(max(args.budget - (time.perf_counter() - start), 30.0))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(markdown(result))
    print(f"{time.perf_counter() - start:.0f} s; wrote {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
