"""Seconds, not forwards: every shipped model's AR, documented exact methods, the best fixed
keyed setting of a sweep (the oracle: auto's own family, the same tokens as AR) and auto,
at 1 and 2 threads and batch 1 and 4.

    PYTHONPATH=. python benchmarks/wall_time.py                                  # every model, ~40 min
    PYTHONPATH=. python benchmarks/wall_time.py --models image --samples 2 --threads 1 --batches 1

For each (threads, batch) cell and each sample (a condition and a seed), AR and every
method decode the same batch back to back, so each method is timed beside its AR twin on
this shared, noisy machine; a method's speed-up is its tokens per second over AR's, summed
over the samples (seconds per call where every sample has the same length). The oracle,
the fixed setting fastest on those samples, is then timed again beside AR and auto on as
many held-out samples, and auto is compared with it there (the best of several noisy
timings overstates its own speed-up). Seconds are the engine's decode time (`DecodeStats.wall_time_s`: prefill to last commit);
forwards are per sample. auto measures its cost curve once per cell, before the timed
samples, into a fresh cache folder of the run (the one-off calibration is reported
beside the table). LPD is left out: it decodes in its own group order, where auto does not
apply. Writes `benchmarks/results/wall_time.{md,json}` and `wall_time.png`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from mmspec.io.files import atomic_write
from mmspec.runs.bench import environment, git_commit, speedup_plot, write_results
from mmspec.decoding.auto import describe_choices, merge_choices
from mmspec.decoding.config import DecodingConfig

C = DecodingConfig.from_name


@dataclass
class Case:
    """One shipped model: how to load it, how to decode sample i as a batch, and its rows."""

    load: Callable
    decode: Callable  # (pipe, sample, batch, config, seed) -> the pipeline's output (`.tokens`, `.stats`: one per sequence)
    documented: list  # the exact settings its docs page reports
    sweep: list  # fixed exact settings tried for the oracle


def image_case() -> Case:
    from mmspec.assets import DEFAULT_ASSETS
    from mmspec.pipelines import load_pipeline

    def decode(pipe, i, batch, config, seed):
        return pipe(class_labels=[i % 10], num_images_per_prompt=batch, decoding=config, output_type="pt",
                    generator=torch.Generator().manual_seed(seed))

    # fixed settings without the shipped draft head, then the longer windows with it (None: the pipeline's)
    windows = [replace(C("keyed", window=w, init="above"), head=False) for w in (4, 8, 16, 32)]
    learned = [C("keyed", window=w, init="above") for w in (16, 32)]
    documented = [C("sjd"), C("mc-sjd"), C("mc-sjd", init="above"), replace(C("auto"), head=False)]
    return Case(lambda: load_pipeline(DEFAULT_ASSETS), decode, documented,
                windows + [replace(C("keyed", window=32), head=False)] + learned)


def video_case() -> Case:
    from mmspec.assets import VIDEO_ASSETS
    from mmspec.pipelines import load_pipeline

    def decode(pipe, i, batch, config, seed):
        return pipe([i % len(pipe.class_names)], num_videos_per_prompt=batch, decoding=config, output_type="pt",
                    generator=torch.Generator().manual_seed(seed))

    return Case(lambda: load_pipeline(VIDEO_ASSETS), decode,
                [C("mc-sjd"), C("mc-sjd", init="previous-frame", window=64)],
                [C("keyed", init="previous-frame", window=w) for w in (8, 16, 32, 64)])


def speech_case() -> Case:
    from mmspec.assets import SPEECH_ASSETS
    from mmspec.pipelines import load_pipeline

    words = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

    def decode(pipe, i, batch, config, seed):
        return pipe(words[i % 10], num_audios_per_prompt=batch, decoding=config,
                    generator=torch.Generator().manual_seed(seed))

    return Case(lambda: load_pipeline(SPEECH_ASSETS), decode,
                [C("mc-sjd", init="previous-step"), C("mc-sjd", init="previous-step", branches=4)],
                [C("keyed", init="previous-step", window=w) for w in (4, 8, 16)])


def mesh_case() -> Case:
    from mmspec.assets import MESH_ASSETS
    from mmspec.pipelines.mesh import MeshPipeline

    def decode(pipe, i, batch, config, seed):
        return pipe(class_labels=[i % len(pipe.class_names)], num_meshes=batch, decoding=config,
                    generator=torch.Generator().manual_seed(seed))

    return Case(lambda: MeshPipeline.from_pretrained(MESH_ASSETS), decode, [C("mc-sjd"), C("mc-sjd+lookup")],
                [C("keyed", window=w) for w in (8, 16, 32)] + [C("keyed+lookup", window=32)])


def captioner_case(sample: bool = False) -> Case:
    """Greedy captions (the captioner's default), or sampled ones with `sample`."""
    from mmspec.datasets.shape_captions import load_scenes
    from mmspec.io.images import to_pil
    from mmspec.pipelines.captioning import CaptioningPipeline

    images = to_pil(load_scenes("heldout", 40)[0])

    def decode(pipe, i, batch, config, seed):
        return pipe([images[(i * batch + k) % len(images)] for k in range(batch)], decoding=config, do_sample=sample,
                    generator=torch.Generator().manual_seed(seed))

    return Case(CaptioningPipeline.from_pretrained, decode, [C("mc-sjd+lookup"), C("prompt-lookup")],
                [C("keyed+lookup", window=w) for w in (4, 8, 32)]
                + [DecodingConfig(method="keyed", init="phrase-lookup", redraft=True, window=w) for w in (4, 8, 32)])


CASES = {"image": image_case, "video": video_case, "speech": speech_case, "mesh": mesh_case, "captioner": captioner_case}


def tokens_per_second(row: dict) -> float:
    """Tokens over seconds of all samples: sequences that stop on their own (meshes, captions)
    differ in length between methods, so seconds per call alone would reward a short sample."""
    return sum(row["tokens"]) / sum(row["seconds"])


def decode_rows(case: Case, pipe, configs: list, samples: range, batch: int, seed: int) -> dict:
    """Sample i of `samples` decoded by each config back to back (seed + i): per config its
    seconds, tokens, forwards and auto's choices."""
    rows = {config.describe(): {"config": config, "seconds": [], "tokens": [], "forwards": [], "choices": []}
            for config in configs}
    for i in samples:
        for config in configs:
            stats = case.decode(pipe, i, batch, config, seed + i).stats
            row = rows[config.describe()]
            row["seconds"].append(stats[0].wall_time_s)
            row["tokens"].append(sum(int(s.lengths.sum()) for s in stats))
            row["forwards"].extend(s.forward_passes for s in stats)
            if stats[0].choices is not None:
                row["choices"].append(stats[0].choices)
    return rows


def summary(rows: dict, case: Case) -> list:
    """Per config: mean forwards per sequence, seconds and tokens per call, speed-up over AR."""
    ar = rows["ar"]
    table = []
    for name, row in rows.items():
        table.append({
            "method": name, "exact": row["config"].exact,
            "forwards": sum(row["forwards"]) / len(row["forwards"]),
            "seconds": sum(row["seconds"]) / len(row["seconds"]),
            "tokens": sum(row["tokens"]) / len(row["tokens"]),
            "speedup": tokens_per_second(row) / tokens_per_second(ar),
            "role": "ar" if name == "ar" else "auto" if name == "auto" else
                    "documented" if row["config"] in case.documented else "sweep",
            **({"choices": describe_choices(merge_choices(row["choices"]))} if row["choices"] else {}),
        })
    return table


def run_cell(case: Case, pipe, samples: int, batch: int, seed: int) -> dict:
    """Every row of one (threads, batch) cell; sample i decodes AR and each method back to back.

    The oracle is the fixed setting that was fastest on these samples; picked as the best
    of several noisy timings, its speed-up there is biased upwards (the winner's curse). So
    auto is compared with it on `samples` further samples (other conditions and seeds),
    where AR, the oracle's setting and auto are timed side by side again."""
    auto = C("auto")
    configs = list({c.describe(): c for c in [C("ar")] + case.documented + case.sweep + [auto]}.values())
    started = time.perf_counter()
    case.decode(pipe, 0, batch, auto, seed)  # auto's one-off calibration of this cell, and a warm-up
    calibration_s = time.perf_counter() - started
    table = summary(decode_rows(case, pipe, configs, range(samples), batch, seed), case)
    oracle = max((r for r in table if r["role"] == "sweep"), key=lambda r: r["speedup"])
    oracle_config = next(c for c in configs if c.describe() == oracle["method"])
    held_out = summary(decode_rows(case, pipe, [C("ar"), oracle_config, auto], range(samples, 2 * samples), batch, seed), case)
    by_name = {r["method"]: r for r in held_out}
    return {"rows": table, "oracle": oracle["method"], "held_out": held_out,
            "auto_over_oracle": by_name["auto"]["speedup"] / by_name[oracle["method"]]["speedup"],
            "calibration_s": calibration_s}


def markdown(results: dict, meta: dict) -> str:
    lines = [f"# Wall time of every shipped model ({meta['date']}, commit {meta['commit']})", "",
             f"{meta['samples']} samples per cell, each decoded by AR and every method back to back; seconds are the decode "
             f"(prefill to last commit) per call; speed-up = the method's tokens per second over AR's, summed over the samples "
             "(the same as AR seconds over the method's where every sample has the same length). "
             f"Device: {meta['environment']['device']}, torch {meta['environment']['torch']}. "
             "Oracle: the fastest fixed keyed setting of the rows above it (the sweep; auto's family), found in the same run, then timed again "
             "beside AR and auto on as many held-out samples (other conditions and seeds).", ""]
    for model, cells in results.items():
        lines += [f"## {model}", ""]
        for cell, out in cells.items():
            lines += [f"### {cell}", "", "| method | forwards per sample | tokens per call | seconds per call | x faster than AR |",
                      "|---|---|---|---|---|"]
            for r in out["rows"]:
                name = r["method"] + (" (oracle)" if r["method"] == out["oracle"] else "")
                lines.append(f"| {name} | {r['forwards']:.1f} | {r['tokens']:.1f} | {r['seconds']:.3f} | {r['speedup']:.2f} |")
            held = {r["method"]: r for r in out["held_out"]}
            lines += ["", f"Held-out samples (AR, the oracle's setting and auto side by side): oracle "
                      f"{held[out['oracle']]['speedup']:.2f}x AR, auto {held['auto']['speedup']:.2f}x AR "
                      f"({held['auto']['forwards']:.1f} forwards), auto at {out['auto_over_oracle']:.2f}x the oracle; "
                      f"auto chose {held['auto'].get('choices', '-')}; calibration and warm-up call {out['calibration_s']:.1f} s.", ""]
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    """Forward and wall-time speed-ups over AR of auto and the oracle, per model and cell."""
    rows = []
    for model, cells in results.items():
        for cell, out in cells.items():
            by_name = {r["method"]: r for r in out["held_out"]}
            ar = by_name["ar"]["forwards"]
            for label, r in (("auto", by_name["auto"]), ("oracle", by_name[out["oracle"]])):
                rows.append({"method": f"{model}, {cell}: {label}", "fewer_forwards_vs_ar": ar / r["forwards"],
                             "faster_vs_ar": r["speedup"]})
    atomic_write(path, lambda tmp: speedup_plot(rows).save(tmp, format="PNG"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--samples", type=int, default=4, help="samples per cell (default 4)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    os.environ["MMSPEC_CACHE_DIR"] = tempfile.mkdtemp(prefix="mmspec-wall-time-")  # every curve measured in this run
    results = {}
    for model in args.models:
        case = CASES[model]()
        pipe = case.load()
        if hasattr(pipe, "set_progress_bar_config"):
            pipe.set_progress_bar_config(disable=True)
        results[model] = {}
        for threads in args.threads:
            torch.set_num_threads(threads)
            for batch in args.batches:
                cell = f"{threads} thread{'s' if threads > 1 else ''}, batch {batch}"
                print(f"{model}: {cell}", flush=True)
                results[model][cell] = out = run_cell(case, pipe, args.samples, batch, args.seed)
                held = {r["method"]: r for r in out["held_out"]}
                print(f"  held out: auto {held['auto']['speedup']:.2f}x AR, oracle {out['oracle']} "
                      f"{held[out['oracle']]['speedup']:.2f}x", flush=True)
    meta = {"date": time.strftime("%Y-%m-%d"), "commit": git_commit(), "samples": args.samples, "seed": args.seed,
            "environment": environment()}
    write_results(args.out, "wall_time", markdown(results, meta), {"meta": meta, "results": results})
    plot(results, Path(args.out) / "wall_time.png")


if __name__ == "__main__":
    main()
