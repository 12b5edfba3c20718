"""`mmspec generate`: a grid of images, one labelled row per class or prompt, each row timed
beside AR on the same condition, seed and batch."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from mmspec.commands.common import (
    AR_BASELINE,
    UserError,
    add_condition,
    add_decoding,
    add_method,
    add_pipeline,
    check_new_file,
    checked_decodings,
    conditions,
    load,
    sampling_kwargs,
)


def add_parser(sub) -> None:
    g = sub.add_parser("generate", help="generate a grid of images, one labelled row per class or prompt")
    add_pipeline(g)
    add_method(g)
    add_decoding(g)
    add_condition(g, per_class=4)
    g.add_argument("--out", default="outputs/grid.png", help="output PNG (default outputs/grid.png)")
    g.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    g.set_defaults(run=cmd_generate)


def cmd_generate(args) -> None:
    from mmspec.io.files import atomic_write
    from mmspec.io.images import image_grid, label_rows
    from mmspec.runs.placement import describe_placement

    started = time.perf_counter()
    out_path = Path(args.out)
    if out_path.suffix.lower() != ".png":
        raise UserError(f"--out {args.out!r} must name a .png file")
    check_new_file(out_path, args.overwrite)
    replacing = out_path.exists()
    pipe = load(args)
    [config] = checked_decodings(args, pipe)
    rows, names = conditions(args, pipe)
    sampling = sampling_kwargs(args)
    images, outputs, ar_outputs = [], [], []
    compare = config.name != AR_BASELINE
    for i, row in enumerate(rows):
        seed = args.seed + i
        out = pipe(**row, num_images_per_prompt=args.per_class, decoding=config, generator=torch.Generator().manual_seed(seed), **sampling)
        images += out.images
        outputs.append(out)
        line = f"row {i + 1}/{len(rows)} ({names[i]}): {mean_forwards(out):.0f} forward passes per image, {out.stats[0].wall_time_s:.2f} s"
        if compare:  # AR on the same condition, seed and batch, right after: side by side on a noisy machine
            ar = pipe(**row, num_images_per_prompt=args.per_class, decoding=AR_BASELINE, generator=torch.Generator().manual_seed(seed),
                      **sampling)
            ar_outputs.append(ar)
            line += f" (AR {mean_forwards(ar):.0f} and {ar.stats[0].wall_time_s:.2f} s)"
        print(line, flush=True)
    grid = label_rows(image_grid(images, cols=args.per_class, scale=2), names)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out_path, lambda tmp: grid.save(tmp, format="PNG"))
    stats = [s for out in outputs for s in out.stats]
    exact = all(s.exact for s in stats)
    print(f"{'replaced' if replacing else 'wrote'} {out_path} ({len(rows)} rows x {args.per_class} images; rows: {', '.join(names)})")
    print(f"decoding: {config.describe()} ({'exact: samples the model' if exact else 'relaxed: approximates the model'}); "
          f"forward passes: {sum(s.forward_passes for s in stats) / len(stats):.1f} per image on average "
          f"(AR needs {pipe.sequence_length}); decoding wall time: {sum(o.stats[0].wall_time_s for o in outputs):.1f} s")
    if stats[0].choices is not None:
        from mmspec.decoding.auto import describe_choices, merge_choices

        print(f"auto chose: {describe_choices(merge_choices([s.choices for s in stats]))}")
    if compare:
        print(ar_comparison(outputs, ar_outputs, args.per_class))
    print(f"total wall time: {time.perf_counter() - started:.1f} s, {describe_placement(pipe)}")


def mean_forwards(out) -> float:
    return sum(s.forward_passes for s in out.stats) / len(out.stats)


def ar_comparison(outputs: list, ar_outputs: list, per_class: int) -> str:
    """Every row against AR on the same condition, seed and batch, decoded right after it:
    the speed-up in seconds, not only in forwards."""
    method_s = sum(o.stats[0].wall_time_s for o in outputs)
    ar_s = sum(o.stats[0].wall_time_s for o in ar_outputs)
    method_f = sum(mean_forwards(o) for o in outputs) / len(outputs)
    ar_f = sum(mean_forwards(o) for o in ar_outputs) / len(ar_outputs)
    same = sum(int(torch.equal(mine, theirs)) for o, a in zip(outputs, ar_outputs) for mine, theirs in zip(o.tokens, a.tokens))
    return (f"against AR on the same {len(outputs)} row(s) of {per_class} image(s), same seeds, torch threads "
            f"{torch.get_num_threads()}: AR {ar_s:.1f} s and {ar_f:.0f} forwards per image, {outputs[0].stats[0].method} "
            f"{method_s:.1f} s and {method_f:.0f}: {ar_f / max(method_f, 1e-9):.2f}x fewer forwards, "
            f"wall-time speed-up over AR {ar_s / max(method_s, 1e-9):.2f}x; "
            f"the same tokens as AR in {same} of {len(outputs) * per_class} images")
