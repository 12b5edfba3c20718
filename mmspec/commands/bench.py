"""`mmspec bench`: decoding methods compared on the same conditions and seeds, as a table
and a speed-up plot."""

from __future__ import annotations

from pathlib import Path

from mmspec.commands.common import (
    AR_BASELINE,
    add_condition,
    add_decoding,
    add_pipeline,
    check_out_dir,
    checked_decodings,
    conditions,
    load,
    sampling_kwargs,
)


def add_parser(sub) -> None:
    b = sub.add_parser("bench", help="compare decoding methods on the same conditions and seeds")
    add_pipeline(b)
    add_decoding(b)
    add_condition(b, per_class=2)
    b.add_argument("--methods", nargs="+", default=["ar", "sjd", "mc-sjd", "mc-sjd+gsd", "zipar+mc-sjd"],
                   help="decoding methods to compare; ar, the ratios' baseline, runs first when not named "
                        "(default: ar sjd mc-sjd mc-sjd+gsd zipar+mc-sjd)")
    b.add_argument("--out-dir", default="outputs/bench",
                   help="where bench.md (the table), bench.json (its data) and bench.png (the plot) go (default outputs/bench)")
    b.add_argument("--overwrite", action="store_true", help="replace the bench files in --out-dir if they exist")
    b.set_defaults(run=cmd_bench)


def cmd_bench(args) -> None:
    from tqdm import tqdm

    from mmspec.runs.bench import environment, report, report_paths, run_methods
    from mmspec.runs.placement import describe_placement, placement

    if AR_BASELINE not in args.methods:  # every ratio of the table is against AR
        args.methods = [AR_BASELINE, *args.methods]
    check_out_dir(Path(args.out_dir), report_paths(args.out_dir, "bench"), args.overwrite)
    pipe = load(args)
    pipe.set_progress_bar_config(disable=True)
    configs = checked_decodings(args, pipe)
    rows, names = conditions(args, pipe)
    items = [row for row in rows for _ in range(args.per_class)]
    bar = tqdm(total=len(configs) * len(items), desc="bench", unit="img")
    results = run_methods(pipe, items, configs, seed=args.seed, call_kwargs=sampling_kwargs(args),
                          on_progress=lambda name, done, total: bar.update(1))
    bar.close()
    meta = {"description": f"{args.pipeline}: {', '.join(names)}; {args.per_class} image(s) each, batch 1, "
                           f"{describe_placement(pipe)}",
            "seed": args.seed, **environment(pipe.device), "dtype": placement(pipe)["dtype"]}
    md, js, png = report(results, args.out_dir, "bench", meta)
    print(md.read_text())
    print(f"wrote {md}, {js} and {png}")
