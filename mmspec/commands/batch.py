"""`mmspec batch`: one image per line of a prompts or labels file, resumable; scales out
with `accelerate launch` (each process on its own GPU, unless `--device` names one, or the CPU)."""

from __future__ import annotations

from pathlib import Path

from mmspec.commands.common import add_decoding, add_method, add_pipeline, checked_decodings, load, recorded_pipeline, sampling_kwargs


def add_parser(sub) -> None:
    t = sub.add_parser("batch", help="one image per line of a prompts/labels file, resumable; scales out with accelerate launch")
    add_pipeline(t)
    add_method(t)
    add_decoding(t)
    t.add_argument("--prompts", required=True, help="text file (one prompt, or class name or label, per line) or .jsonl (objects with prompt or a "
                        "class_label, a class name or label, and an optional id: a plain file name)")
    t.add_argument("--out", required=True, help="output directory: images/, records/, run.json, manifest.jsonl")
    t.add_argument("--restart", action="store_true",
                   help="delete the results of an earlier run in --out (needed when its settings differ) and start over")
    t.set_defaults(run=cmd_batch)


def cmd_batch(args) -> None:
    from accelerate import PartialState
    from tqdm import tqdm

    from mmspec.io.files import check_writable
    from mmspec.runs.batch import clear_results, read_items, run_batch, write_manifest
    from mmspec.runs.placement import describe_placement

    out_dir = Path(args.out)
    check_writable(out_dir)
    state = PartialState(cpu=args.device.type == "cpu")  # the processes share the items whatever their device
    pipe = load(args)  # on args.device: under accelerate launch, this process's GPU (resolve_placement)
    pipe.set_progress_bar_config(disable=True)
    [config] = checked_decodings(args, pipe)
    items = read_items(args.prompts, pipe.class_names if pipe.condition_kind == "class" else None)
    if args.restart and state.is_main_process:
        clear_results(out_dir)
    state.wait_for_everyone()  # no process reads the folder while the main one clears it
    mine = items[state.process_index :: state.num_processes]
    bars = []  # the bar starts with the first item, after the run's checks: an error is a line of its own

    def progress(item, skipped: bool) -> None:
        if not bars:
            bars.append(tqdm(total=len(mine), desc=f"batch (process {state.process_index + 1}/{state.num_processes})", unit="img",
                             position=state.process_index))
        bars[0].update(1)

    made = run_batch(pipe, items, out_dir, decoding=config, seed=args.seed, rank=state.process_index, world_size=state.num_processes,
              call_kwargs=sampling_kwargs(args), pipeline=recorded_pipeline(args.pipeline), on_item=progress)
    for bar in bars:
        bar.close()
    state.wait_for_everyone()
    if state.is_main_process:
        manifest = write_manifest(out_dir, items)
        done_before = len(mine) - len(made)  # this process's share; with several, each writes its own
        print(f"wrote {len(made)} items ({done_before} already done) {describe_placement(pipe)}; manifest: {manifest}")
