"""Learned drafts on the shipped image model: forwards and seconds with and without its draft
head, each sample decoded by AR and every row back to back.

    PYTHONPATH=. python benchmarks/draft_heads.py                   # 30 samples, ~10 min on 1 thread
    PYTHONPATH=. python benchmarks/draft_heads.py --samples 5 --threads 2

Sample i decodes class i % 10 with seed 1000 + i, batch 1, one image per call, by AR and each
row in turn, at `--threads` torch threads. Keyed rows and auto must give AR's very tokens
(counted in the table); MC-SJD samples the model's distribution (another image). Writes
benchmarks/results/draft_heads.{md,json,png}.
"""

from __future__ import annotations

import argparse
import dataclasses

import torch

from mmspec.decoding.config import DecodingConfig
from mmspec.pipelines.llamagen import LlamaGenPipeline
from mmspec.runs.bench import dated_environment, speedup_plot, write_results
from mmspec.runs.train_drafter import load_drafter

C = DecodingConfig.from_name


def rows(head) -> list[DecodingConfig]:
    """Each training-free setting beside the same setting with the head."""
    plain = [C("keyed", window=16, init="above"), C("keyed", window=32, init="above"), C("mc-sjd", window=16, init="above"),
             C("auto")]
    out = [C("ar")]
    for config in plain:
        out.append(dataclasses.replace(config, head=False))
        out.append(dataclasses.replace(config, head=head))
    out.append(dataclasses.replace(C("keyed", window=16, init="above"), head=head, head_depth=2))
    return out


def pipeline_and_head(doc: str, samples: int, threads: int, argv=None, **more) -> tuple:
    """The arguments every draft-head benchmark takes (`more`: further options, name ->
    default), parsed; the pipeline (no progress bar, threads set) and the head to measure."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--pipeline", default="default")
    parser.add_argument("--drafter", help="a head folder (default: the pipeline's own)")
    parser.add_argument("--samples", type=int, default=samples)
    parser.add_argument("--threads", type=int, default=threads)
    parser.add_argument("--out", default="benchmarks/results")
    for name, default in more.items():
        parser.add_argument(f"--{name}", type=type(default), default=default)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    pipe = LlamaGenPipeline.from_pretrained(args.pipeline)
    pipe.set_progress_bar_config(disable=True)
    head = load_drafter(args.drafter, pipe.transformer) if args.drafter else pipe.drafter
    if head is None:
        raise SystemExit(f"{args.pipeline} has no drafter; give --drafter DIR")
    return args, pipe, head


def first_draft_accepted(stats) -> tuple[int, int]:
    """(forwards whose window's first draft was accepted, Jacobi forwards) of one decode: a
    forward that committed more than one position accepted it."""
    per_forward = torch.bincount(stats.commit_iteration.flatten())[1:]  # forward 0 is the prefill
    per_forward = per_forward[per_forward > 0]
    return int((per_forward > 1).sum()), len(per_forward)


def main(argv=None) -> None:
    args, pipe, head = pipeline_and_head(__doc__, samples=30, threads=1, argv=argv)
    configs = rows(head)
    stats = {c.describe(): {"forwards": [], "seconds": [], "same": 0, "first": [0, 0]} for c in configs}
    pipe(class_labels=[0], decoding=configs[-1], output_type="tokens", generator=torch.Generator().manual_seed(0))  # warm-up
    for i in range(args.samples):
        ar_tokens = None
        for config in configs:
            out = pipe(class_labels=[i % 10], decoding=config, output_type="tokens", generator=torch.Generator().manual_seed(1000 + i))
            row = stats[config.describe()]
            row["forwards"].append(out.stats[0].forward_passes)
            row["seconds"].append(out.stats[0].wall_time_s)
            ar_tokens = out.tokens if ar_tokens is None else ar_tokens
            row["same"] += int(torch.equal(out.tokens, ar_tokens))
            row["first"] = [a + b for a, b in zip(row["first"], first_draft_accepted(out.stats[0]))]
        print(f"sample {i + 1}/{args.samples}", flush=True)
    ar = stats["ar"]
    table = []
    for name, row in stats.items():
        forwards, seconds = sum(row["forwards"]) / args.samples, sum(row["seconds"]) / args.samples
        table.append({"method": name, "forwards": forwards, "seconds": seconds, "same_as_ar": row["same"],
                      "first_draft_accepted": row["first"][0] / max(row["first"][1], 1),
                      "fewer_forwards_vs_ar": sum(ar["forwards"]) / sum(row["forwards"]),
                      "faster_vs_ar": sum(ar["seconds"]) / sum(row["seconds"])})
    env = dated_environment()
    lines = [
        "# draft_heads", "",
        f"Shipped image model and its draft head, {args.samples} samples (class i % 10, seed 1000 + i), batch 1, torch on "
        f"{args.threads} thread(s), each sample decoded by AR and every row back to back; {env['date']}, commit {env['commit']}, "
        f"{env['device']}. Seconds: the decode (prefill to last commit) per image.", "",
        "| method | forwards / image | x fewer forwards | seconds / image | x faster | first draft accepted | same tokens as AR |",
        "|---|---|---|---|---|---|---|",
    ]
    accepted = lambda r: "" if r["method"] == "ar" else f"{r['first_draft_accepted']:.3f}"  # noqa: E731
    lines += [f"| {r['method']} | {r['forwards']:.1f} | {r['fewer_forwards_vs_ar']:.2f} | {r['seconds']:.3f} | "
              f"{r['faster_vs_ar']:.2f} | {accepted(r)} | {r['same_as_ar']} of {args.samples} |" for r in table]
    path = write_results(args.out, "draft_heads", "\n".join(lines), {"rows": table, "args": vars(args), **env})
    speedup_plot(table).save(path.with_suffix(".png"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
