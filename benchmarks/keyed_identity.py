"""The same seed, the same tokens: how often the default decoding (auto, on its measured
cost curve) returns exactly AR's tokens on every shipped model, and what keyed Jacobi costs
in forwards beside MC-SJD at the same window and first drafts.

    PYTHONPATH=. python benchmarks/keyed_identity.py                 # 100 samples per model, ~15 min
    PYTHONPATH=. python benchmarks/keyed_identity.py --models image --samples 10

Sample i decodes condition i (cycling through the model's classes) with seed 1000 + i, batch
1, at `--threads` (default 1), by AR, auto, a fixed keyed setting and MC-SJD at that same
setting. Identity is token for token in float32 on this CPU: where auto and AR differ, a
near-tie between two perturbed scores fell the other way in a forward of another shape (a
window of several inputs against AR's one), and the table counts those samples and the
positions where they first differ. The captioner samples here (do_sample=True): greedy
captions would make the identity trivial. Writes benchmarks/results/keyed_identity.{md,json}.
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.wall_time import CASES, captioner_case
from mmspec.decoding.config import DecodingConfig
from mmspec.runs.bench import dated_environment, write_results

C = DecodingConfig.from_name
# per model: the keyed setting and the MC-SJD setting with the same window and first drafts
PAIRS = {
    "image": (C("keyed", window=16, init="above"), C("mc-sjd", window=16, init="above")),
    "video": (C("keyed", window=32, init="previous-frame"), C("mc-sjd", window=32, init="previous-frame")),
    "speech": (C("keyed", window=8, init="previous-step"), C("mc-sjd", window=8, init="previous-step")),
    "mesh": (C("keyed", window=32), C("mc-sjd", window=32)),
    "captioner": (C("keyed+lookup", window=8), C("mc-sjd+lookup", window=8)),
}


def first_difference(a: torch.Tensor, b: torch.Tensor) -> int | None:
    """The first position where two token tensors differ (padding to the longer), or None."""
    a, b = a.reshape(a.shape[0], -1)[0], b.reshape(b.shape[0], -1)[0]
    n = max(len(a), len(b))
    a, b = (torch.nn.functional.pad(x, (0, n - len(x)), value=-2) for x in (a, b))
    differ = (a != b).nonzero()
    return None if len(differ) == 0 else int(differ[0])


def run_model(model: str, samples: int) -> dict:
    case = captioner_case(sample=True) if model == "captioner" else CASES[model]()
    pipe = case.load()
    if hasattr(pipe, "set_progress_bar_config"):
        pipe.set_progress_bar_config(disable=True)
    keyed, mc_sjd = PAIRS[model]
    configs = {"ar": C("ar"), "auto": C("auto"), "keyed": keyed, "mc-sjd": mc_sjd}
    case.decode(pipe, 0, 1, configs["auto"], 0)  # auto's cost curve, measured once
    forwards = {name: [] for name in configs}
    seconds = {name: 0.0 for name in configs}
    flips, tokens = [], 0
    same = {"auto": 0, "keyed": 0}
    for i in range(samples):
        out = {}
        for name, config in configs.items():
            out[name] = case.decode(pipe, i, 1, config, 1000 + i)
            forwards[name].append(out[name].stats[0].forward_passes)
            seconds[name] += out[name].stats[0].wall_time_s
        tokens += out["ar"].stats[0].tokens_committed
        for name in same:
            where = first_difference(out[name].tokens, out["ar"].tokens)
            same[name] += where is None
            if where is not None:
                flips.append({"sample": i, "method": name, "position": where})
    mean = lambda xs: sum(xs) / len(xs)
    return {"samples": samples, "tokens": tokens, "same_as_ar": same, "flips": flips,
            "forwards": {name: mean(v) for name, v in forwards.items()}, "seconds": seconds,
            "keyed": keyed.describe(), "mc-sjd": mc_sjd.describe()}


def markdown(results: dict, meta: dict) -> str:
    lines = [f"# The same seed, the same tokens ({meta['date']}, commit {meta['commit']})", "",
             f"Batch 1, {meta['torch_threads']} thread(s), float32, device {meta['device']}; sample i: seed 1000 + i. "
             "auto runs on its measured cost curve. 'identical' counts samples whose every token equals AR's; "
             "the keyed and MC-SJD columns are mean forwards per sample at the same window and first drafts.", "",
             "| model | samples | auto identical to AR | keyed identical to AR | forwards: AR / auto | keyed setting | "
             "forwards: keyed / MC-SJD (ratio) | seconds: AR / auto (sum) |",
             "|---|---|---|---|---|---|---|---|"]
    for model, r in results.items():
        f, s, n = r["forwards"], r["seconds"], r["samples"]
        lines.append(f"| {model} | {n} | {r['same_as_ar']['auto']}/{n} | {r['same_as_ar']['keyed']}/{n} | "
                     f"{f['ar']:.1f} / {f['auto']:.1f} | {r['keyed']} | {f['keyed']:.1f} / {f['mc-sjd']:.1f} "
                     f"({f['keyed'] / f['mc-sjd']:.3f}) | {s['ar']:.1f} / {s['auto']:.1f} |")
    flips = [(m, x) for m, r in results.items() for x in r["flips"]]
    lines += ["", "Samples that differ from AR (a near-tie flipped between forward shapes): "
              + (", ".join(f"{m} sample {x['sample']} ({x['method']}, first at position {x['position']})" for m, x in flips)
                 if flips else "none.")]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {}
    for model in args.models:
        started = time.perf_counter()
        results[model] = r = run_model(model, args.samples)
        print(f"{model}: auto {r['same_as_ar']['auto']}/{r['samples']} identical, forwards {r['forwards']} "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    meta = dated_environment()
    write_results(args.out, "keyed_identity", markdown(results, meta), {"meta": meta, "results": results})


if __name__ == "__main__":
    main()
