"""The original LlamaGen's own AR beside mmspec's AR, auto and MC-SJD, on the shipped image model.

    git clone https://github.com/FoundationVision/LlamaGen /tmp/llamagen   # tested at ce98ec4
    PYTHONPATH=. python benchmarks/perf/original_ar.py --llamagen-repo /tmp/llamagen     # 1, 2 threads x batch 1, 4
    PYTHONPATH=. python benchmarks/perf/original_ar.py --llamagen-repo /tmp/llamagen --samples 1 --threads 1 --batches 1

The shipped transformer's weights (`LlamaGenGPT`, the original's key names) are copied,
name by name with a shape check, into the original `autoregressive/models/gpt.py`
`Transformer`, imported at run time from `--llamagen-repo` (nothing of it lives here).
Before any timing, one sample is decoded greedily (temperature 0, top-k 1) by the
original's `generate(...)` and by mmspec's AR, auto and MC-SJD; the original's and
mmspec's AR tokens must be equal, or the run stops.

For each (threads, batch) cell and each sample i (class i % 10, seed + i), four decoders
run back to back on the same label, seed and sampling (the pipeline's default_sampling:
CFG 3.0, temperature 1, top-k 0 = all, top-p 1): the original's `generate(...)` (its KV
cache, `cfg_scale`, eager float32 on CPU, as its sample script runs without --compile),
then mmspec's `ar`, `auto` and `mc-sjd` (window 16, init above). Each decoder is called
once on sample 0 before the timed samples (a warm-up; for auto, its cost-curve
calibration, measured into a fresh cache folder of the run). Seconds are perf_counter
around the whole token generation of a call, the same span for both codes: input
checks, cache set-up, prefill and every step, no VQ decode (mmspec is called with
`output_type="tokens"`, which is the `"pt"` call without its detokenize step; the
engine's own `DecodeStats.wall_time_s` is kept in the JSON). Forwards are per sample:
the original's are counted by a hook on its `Transformer.forward`, one per batched call.

The original's CPU path runs unpatched: `gpt.py` and `generate.py` hard-code no CUDA
device (`setup_caches` allocates under `torch.device(cond.device)`). Its one CUDA name,
`torch.backends.cuda.sdp_kernel(...)` around every decode step, only switches CUDA
attention kernels (nothing on CPU) and is deprecated in torch >= 2.3; its FutureWarning
is silenced here. Other things that differ from mmspec by design, all inside its timed
span: it draws with `torch.multinomial` from the global RNG (no generator argument; it is
seeded with `torch.manual_seed(seed)`, so its sampled images are not mmspec's for the
same seed, only from the same distribution), and each call rebuilds its KV caches and a
`[2B, S, S]` causal mask. Its `gpt.py` imports `utils.drop_path`, so the repository goes
first on `sys.path` while it is imported. Writes `benchmarks/results/original_ar.{md,json}`.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from mmspec.runs.bench import environment, git_commit, write_results
from mmspec.utils.checkpoint import load_into
from mmspec.decoding.config import DecodingConfig
from mmspec.core.device import cpu_model

ORIGINAL = "original LlamaGen AR"
# mmspec's rows, by the names the tables give them
METHODS = {"ar": DecodingConfig.from_name("ar"), "auto": DecodingConfig.from_name("auto"),
           "mc-sjd (window=16, init=above)": DecodingConfig.from_name("mc-sjd", window=16, init="above")}


def load_original(repo: Path, transformer):
    """The original `Transformer` holding `transformer`'s weights, and the original
    `generate` function, both imported from the LlamaGen checkout `repo`."""
    if not (repo / "autoregressive" / "models" / "gpt.py").is_file():
        raise SystemExit(f"--llamagen-repo {repo}: no autoregressive/models/gpt.py there; "
                         "clone https://github.com/FoundationVision/LlamaGen and pass its folder")
    sys.path.insert(0, str(repo))  # gpt.py imports `utils.drop_path` from the repository root
    try:
        gpt = importlib.import_module("autoregressive.models.gpt")
        gen = importlib.import_module("autoregressive.models.generate")
    finally:
        sys.path.remove(str(repo))
    for module in (gpt, gen):
        if not Path(module.__file__).resolve().is_relative_to(repo.resolve()):
            raise SystemExit(f"{module.__name__} was imported from {module.__file__}, not from --llamagen-repo {repo}")
    # the same field names and meanings: mmspec's config is the original ModelArgs
    ours = dataclasses.asdict(transformer.config)
    fields = [f.name for f in dataclasses.fields(gpt.ModelArgs)]
    missing = [k for k in fields if k not in ours]
    if missing:
        raise SystemExit(f"the original ModelArgs has fields that mmspec's LlamaGenConfig lacks: {', '.join(missing)}")
    model = gpt.Transformer(gpt.ModelArgs(**{k: ours[k] for k in fields}))
    # identical key names; load_into checks that every name and shape matches
    load_into(model, transformer.state_dict(), what="mmspec LlamaGenGPT weights for the original Transformer")
    return model.to(transformer.dtype).eval(), gen.generate


class Original:
    """Calls of the original `generate(...)`, with its forwards counted."""

    def __init__(self, model, generate, sampling: dict, tokens: int):
        self.model, self.generate, self.tokens = model, generate, tokens
        self.sampling = sampling
        self.forwards = 0
        model.register_forward_pre_hook(self._count)

    def _count(self, module, args):
        self.forwards += 1

    def __call__(self, label: int, batch: int, seed: int, greedy: bool = False) -> tuple[torch.Tensor, dict]:
        s = self.sampling
        cond = torch.full((batch,), label, dtype=torch.long)
        # the pipeline's sampling in the original's arguments (sample_logits=True, as its sample script
        # passes); greedy: it divides by max(temperature, 1e-5) and top-k 1 leaves one token to draw
        kwargs = dict(temperature=0.0, top_k=1, top_p=1.0) if greedy else \
            dict(temperature=s["temperature"], top_k=s["top_k"], top_p=s["top_p"])
        torch.manual_seed(seed)  # it draws from the global RNG
        self.forwards = 0
        start = time.perf_counter()
        tokens = self.generate(self.model, cond, self.tokens, cfg_scale=s["guidance_scale"], cfg_interval=-1,
                               sample_logits=True, **kwargs)  # [B, T]
        seconds = time.perf_counter() - start
        return tokens.long(), {"seconds": seconds, "forwards": [self.forwards] * batch}


def mmspec_call(pipe, config: DecodingConfig, label: int, batch: int, seed: int, greedy: bool = False):
    """One pipeline call of `config`; tokens `[B, T]` and its seconds and forwards."""
    kwargs = dict(temperature=0.0, top_k=1) if greedy else {}
    start = time.perf_counter()
    out = pipe(class_labels=[label], num_images_per_prompt=batch, decoding=config, output_type="tokens",
               generator=torch.Generator().manual_seed(seed), **kwargs)
    seconds = time.perf_counter() - start
    return out.tokens, {"seconds": seconds, "forwards": [s.forward_passes for s in out.stats],
                        "engine_seconds": out.stats[0].wall_time_s,
                        **({"choices": out.stats[0].choices} if out.stats[0].choices is not None else {})}


def greedy_check(original: Original, pipe, label: int, seed: int) -> dict:
    """Greedy tokens of one sample: the original's AR against each mmspec method."""
    reference, _ = original(label, 1, seed, greedy=True)
    check = {"label": label, "seed": seed, "tokens": reference.shape[1]}
    for name, config in METHODS.items():
        tokens, _ = mmspec_call(pipe, config, label, 1, seed, greedy=True)
        diff = (tokens != reference).nonzero()
        check[name] = {"equal": bool(torch.equal(tokens, reference)),
                                    "first_difference": int(diff[0, 1]) if len(diff) else None}
    return check


def run_cell(original: Original, pipe, samples: int, batch: int, seed: int) -> dict:
    """Every row of one (threads, batch) cell; sample i runs the four decoders back to back."""
    decoders = {ORIGINAL: lambda i, s: original(i % 10, batch, s)}
    for name, config in METHODS.items():
        decoders["mmspec " + name] = lambda i, s, config=config: mmspec_call(pipe, config, i % 10, batch, s)
    warmup = {}
    for name, decode in decoders.items():  # sample 0 once: warm-up; auto's cost-curve calibration
        started = time.perf_counter()
        decode(0, seed)
        warmup[name] = time.perf_counter() - started
    rows = {name: {"seconds": [], "forwards": [], "engine_seconds": [], "choices": []} for name in decoders}
    for i in range(samples):
        for name, decode in decoders.items():
            _, out = decode(i, seed + i)
            row = rows[name]
            row["seconds"].append(out["seconds"])
            row["forwards"].extend(out["forwards"])
            if "engine_seconds" in out:
                row["engine_seconds"].append(out["engine_seconds"])
            if "choices" in out:
                row["choices"].append(out["choices"])
    base, ours = sum(rows[ORIGINAL]["seconds"]), sum(rows["mmspec ar"]["seconds"])
    table = []
    for name, row in rows.items():
        total = sum(row["seconds"])
        table.append({
            "method": name,
            "forwards": sum(row["forwards"]) / len(row["forwards"]),
            "seconds": total / len(row["seconds"]),
            "faster_than_original_ar": base / total,
            "faster_than_mmspec_ar": ours / total,
            "seconds_each": row["seconds"],
            **({"engine_seconds": sum(row["engine_seconds"]) / len(row["engine_seconds"])} if row["engine_seconds"] else {}),
            **({"choices": row["choices"]} if row["choices"] else {}),
        })
    return {"rows": table, "warmup_s": warmup}


def markdown(results: dict, meta: dict) -> str:
    env, check = meta["environment"], meta["greedy_check"]
    ar_check = check["ar"]
    lines = [f"# The original LlamaGen's AR beside mmspec ({meta['date']}, commit {meta['commit']})", "",
             f"Shipped image model (`mmspec/assets/default`), its weights loaded into the original "
             f"`autoregressive/models/gpt.py` (LlamaGen commit {meta['llamagen_commit']}). CPU: {meta['cpu']}; "
             f"torch {env['torch']}, float32, eager. {meta['samples']} sample{'s' if meta['samples'] > 1 else ''} per cell (class i % 10, seed "
             f"{meta['seed']} + i), every decoder on the same label, seed and sampling ({meta['sampling_text']}), "
             "back to back. Seconds per call: the whole token generation (input checks, cache set-up, prefill, every "
             "step; no VQ decode), after one warm-up call of each decoder; x faster = the samples' seconds of the "
             "original's (or mmspec's) AR over the row's. The original draws from the global RNG, "
             "so its sampled tokens differ from mmspec's for the same seed; the distribution is the same.", "",
             f"Greedy check (temperature 0, top-k 1; class {check['label']}, seed {check['seed']}, {check['tokens']} tokens): "
             + "; ".join(f"{name} {'equal to' if c['equal'] else 'DIFFERS from'} the original's AR"
                         + ("" if c["equal"] else f" (first at token {c['first_difference']})")
                         for name, c in check.items() if isinstance(c, dict)) + ".", ""]
    assert ar_check["equal"]
    for cell, out in results.items():
        lines += [f"## {cell}", "",
                  "| method | forwards per sample | seconds per call | x faster than the original AR | x faster than mmspec AR |",
                  "|---|---|---|---|---|"]
        for r in out["rows"]:
            lines.append(f"| {r['method']} | {r['forwards']:.1f} | {r['seconds']:.3f} | "
                         f"{r['faster_than_original_ar']:.2f} | {r['faster_than_mmspec_ar']:.2f} |")
        lines += ["", "Warm-up call of each decoder (auto: with its calibration): "
                  + ", ".join(f"{name} {s:.1f} s" for name, s in out["warmup_s"].items()) + ".", ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llamagen-repo", type=Path, required=True,
                        help="a checkout of https://github.com/FoundationVision/LlamaGen")
    parser.add_argument("--samples", type=int, default=3, help="timed samples per cell (default 3)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    if args.samples < 1:
        raise SystemExit(f"--samples {args.samples}: give at least 1")
    os.environ["MMSPEC_CACHE_DIR"] = tempfile.mkdtemp(prefix="mmspec-original-ar-")  # auto's curve measured in this run
    # the original enters torch.backends.cuda.sdp_kernel (deprecated, a no-op on CPU) at every step
    warnings.filterwarnings("ignore", category=FutureWarning, message=".*sdp_kernel.*")

    from mmspec.assets import DEFAULT_ASSETS
    from mmspec.pipelines import load_pipeline

    pipe = load_pipeline(DEFAULT_ASSETS)
    pipe.set_progress_bar_config(disable=True)
    sampling = pipe.default_sampling
    model, generate = load_original(args.llamagen_repo, pipe.transformer)
    original = Original(model, generate, sampling, pipe.transformer.config.block_size)

    torch.set_num_threads(args.threads[0])
    check = greedy_check(original, pipe, label=0, seed=args.seed)
    for name, c in check.items():
        if isinstance(c, dict):
            print(f"greedy: mmspec {name} {'equals' if c['equal'] else 'DIFFERS from'} the original's AR "
                  f"({check['tokens']} tokens{'' if c['equal'] else ', first at ' + str(c['first_difference'])})", flush=True)
    if not check["ar"]["equal"]:
        raise SystemExit("the original's and mmspec's greedy AR tokens differ: the weights or the model code disagree; no timing")

    results = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        for batch in args.batches:
            cell = f"{threads} thread{'s' if threads > 1 else ''}, batch {batch}"
            print(cell, flush=True)
            results[cell] = out = run_cell(original, pipe, args.samples, batch, args.seed)
            for r in out["rows"]:
                print(f"  {r['method']}: {r['seconds']:.3f} s, {r['faster_than_original_ar']:.2f}x the original AR, "
                      f"{r['faster_than_mmspec_ar']:.2f}x mmspec AR", flush=True)
    sampling_text = (f"CFG scale {sampling['guidance_scale']:g}, temperature {sampling['temperature']:g}, "
                     f"top-k {sampling['top_k']}{' (all)' if sampling['top_k'] == 0 else ''}, top-p {sampling['top_p']:g}")
    meta = {"date": time.strftime("%Y-%m-%d"), "commit": git_commit(), "samples": args.samples, "seed": args.seed,
            "threads": args.threads, "batches": args.batches, "cpu": cpu_model(), "sampling": sampling,
            "sampling_text": sampling_text, "llamagen_commit": git_commit(args.llamagen_repo), "greedy_check": check,
            "environment": environment()}
    write_results(args.out, "original_ar", markdown(results, meta), {"meta": meta, "results": results})


if __name__ == "__main__":
    main()
