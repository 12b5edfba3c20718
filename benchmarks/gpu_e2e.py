"""The device check: every shipped pipeline and a LlamaGen-XL-size model, each decoding
method against AR on one GPU, and the keyed verification kernel against its reference.

    PYTHONPATH=. python benchmarks/gpu_e2e.py              # one GPU, under 8 minutes
    PYTHONPATH=. python benchmarks/gpu_e2e.py --dry-run    # the same on this CPU, tiny sizes

Models: the six shipped pipelines (`load_pipeline("default" | "video" | "speech" | "mesh" |
"captioner" | "lpd")`, in bfloat16 where the GPU computes in it) at their default call
sizes, and a class-to-image LlamaGen GPT-XL (775M weights: dim 1280, 36 layers, V = 16384,
24x24 tokens, 1000 classes) with random weights from `torch.manual_seed(0)`, in bfloat16,
CFG 4 and top-k 2000. Random weights accept few drafts, so its rows show the engine's
cost at full size, not a trained model's speed-up.

1. decodes: per model and batch, AR, then keyed, auto, SJD and MC-SJD (LPD: its own
   "lpd-20"; XL also keyed with an untrained draft head), each timed beside its AR twin
   (same model, batch, seeds, run): whether the tokens are AR's, forwards
   (`DecodeStats.forward_passes`), the decode's seconds (`DecodeStats.wall_time_s`) and
   the whole call's (the device synchronised), peak memory, and the stats' device line,
   which says whether Triton verified. Item i of a batch has seed `--seed` + i.
2. keyed kernel: `verify_keyed_triton` against `verify_keyed_reference` at LlamaGen's
   V = 16384 (`gpu_verify_check.run_keyed_case`: times, and the winners against the CPU).
3. forward: ms per forward of the XL model by inputs per sequence (what auto's cost curve
   measures), 128 positions committed before them.

Each model is warmed up first (one short call of every method: Triton compiles, CUDA
allocates). Rows stop once `--budget` seconds would be passed (the skipped ones are
listed); the tables are always written, to `--out`.{md,json} with the date, device,
versions, dtype, threads, batches and seed.

`--dry-run` runs the same script on this CPU: the CUDA profile forced on CPU tensors
(`forced_profile("cuda")`) with Triton in its interpreter, so Triton verifies inside every
decode as on a GPU; a tiny LlamaGen (dim 64, 2 layers, V = 64, 4x4 tokens) instead of XL,
the shipped calls cut short (8 image and video positions, 3 speech frames, 2 mesh faces,
4 caption tokens) and without SJD (MC-SJD runs the same kernel), batch 1, no warm-up. Its
times say nothing of a GPU.
"""

from __future__ import annotations

import os
import sys
import time

START = time.perf_counter()
if "--dry-run" in sys.argv:  # Triton reads it once, when first imported (diffusers and transformers may import it)
    os.environ["TRITON_INTERPRET"] = "1"

import argparse  # noqa: E402
import contextlib  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

from mmspec.core.device import device_profile, forced_profile, triton_installed  # noqa: E402
from mmspec.core.sampling import SamplingConfig  # noqa: E402
from mmspec.decoding.auto import describe_choices  # noqa: E402
from mmspec.decoding.config import DecodingConfig  # noqa: E402
from mmspec.decoding.generate import generate  # noqa: E402
from mmspec.models.networks.draft_head import DraftHead  # noqa: E402
from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT  # noqa: E402

RESULTS = Path(__file__).parent / "results"
SHIPPED = ("default", "video", "speech", "mesh", "captioner", "lpd")
METHODS = ("ar", "keyed", "auto", "sjd", "mc-sjd")  # AR first: every other row is timed against it
DRY_RUN_METHODS = ("ar", "keyed", "auto")  # the shipped pipelines' in the dry run; the tiny LlamaGen has SJD and MC-SJD rows
LPD_METHODS = ("ar", "lpd-20")  # LPD decodes group by group; it verifies nothing
XL = dict(dim=1280, n_layer=36, n_head=20, vocab_size=16384, block_size=576, num_classes=1000)  # GPT-XL at 384 px: 775M
TINY = dict(dim=64, n_layer=2, n_head=4, vocab_size=64, block_size=16, num_classes=10)
SAMPLING = SamplingConfig(guidance_scale=4.0, top_k=2000)  # LlamaGen's sampling scripts
SHORT_POSITIONS = 8  # image and video positions of a short call (warm-up; the dry run's calls)
COMMITTED = 128  # positions decoded before a timed forward: mid-image (the dry run: half the tiny model's)


@dataclass
class Report:
    """What the run has found so far, and its time budget. `save()` writes both files; it
    runs after every step, so a run stopped from outside still leaves its tables.

    Args:
        out (`Path`): the results stem (`.md` and `.json` are added).
        meta (`dict`): the date, device, versions, dtype, threads, batches and seed.
        budget_s (`float`): seconds from the script's start after which no step begins.
    """

    out: Path
    meta: dict
    budget_s: float
    decodes: list[dict] = field(default_factory=list)
    kernel: list[dict] = field(default_factory=list)
    forward: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def allows(self, what: str, estimate_s: float = 0.0) -> bool:
        """Whether a step of about `estimate_s` seconds ends within the budget; lists it where not."""
        if time.perf_counter() - START + estimate_s <= self.budget_s:
            return True
        self.skipped.append(what)
        print(f"time budget: skipping {what}", flush=True)
        return False

    def failed(self, what: str, err: Exception) -> None:
        """A step that raised: a finding, recorded (its traceback on stderr); the run goes on."""
        traceback.print_exc()
        self.errors.append(f"{what}: {type(err).__name__}: {(str(err).splitlines() or [''])[0]}")
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def add(self, table: str, row: dict) -> None:
        getattr(self, table).append(row)
        print(json.dumps(row), flush=True)
        self.save()

    def as_dict(self) -> dict:
        meta = dict(self.meta, seconds=time.perf_counter() - START,
                    cpu_max_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        return dict(meta=meta, decodes=self.decodes, kernel=self.kernel, forward=self.forward, skipped=self.skipped,
                    errors=self.errors)

    def save(self) -> None:
        result = self.as_dict()
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.with_suffix(".json").write_text(json.dumps(result, indent=2))
        self.out.with_suffix(".md").write_text(markdown(result))


@dataclass
class Subject:
    """A model under test: `call(decoding, batch, seed, short)` returns its tokens and
    per-item stats; `methods` are (row name, decoding) pairs, AR first."""

    name: str
    dtype: torch.dtype
    methods: list[tuple[str, object]]
    call: Callable
    ar_s: float = 0.0  # the last AR call's seconds: what the next batch's AR is expected to take at least


# --- the models ------------------------------------------------------------------------------


@contextlib.contextmanager
def first_positions(pipe, positions: int | None):
    """An image or video pipeline whose calls decode the first `positions` of their sequence."""
    if positions is None:
        yield
        return
    layout = pipe.transformer.layout
    pipe.transformer.layout = lambda *args, **kwargs: layout(*args, **kwargs).truncate(positions)
    try:
        yield
    finally:
        del pipe.transformer.layout  # the class's method again


def pipeline_call(name: str, pipe, decoding, batch: int, seed: int, short: bool):
    """The shipped pipeline's call for `batch` items (item i: seed + i), at its default
    sizes or `short`; its tokens and per-item stats."""
    generator = [torch.Generator().manual_seed(seed + i) for i in range(batch)]
    common = dict(decoding=decoding, generator=generator)
    with first_positions(pipe, SHORT_POSITIONS if short and name in ("default", "video") else None):
        if name in ("default", "video", "lpd"):
            labels = [i % len(pipe.class_names) for i in range(batch)]
            frames = dict(num_frames=1) if name == "video" and short else {}
            out = pipe(class_labels=labels, output_type="tokens", **frames, **common)
        elif name == "speech":
            duration = dict(duration_s=pipe.max_duration_s / pipe.frames * 3) if short else {}
            out = pipe([pipe.words[i % len(pipe.words)] for i in range(batch)], output_type="tokens", **duration, **common)
        elif name == "mesh":
            out = pipe(class_labels=[i % len(pipe.class_names) for i in range(batch)], **common,
                       **(dict(max_faces=2) if short else {}))
        else:
            from PIL import Image

            images = [Image.new("RGB", (64, 64), (200, 30 * i % 256, 30)) for i in range(batch)]
            out = pipe(images, do_sample=True, **common, **(dict(max_new_tokens=4) if short else {}))
    return out.tokens, out.stats


def load_shipped(name: str, device: str, dtype: torch.dtype, methods: tuple[str, ...]) -> Subject:
    from mmspec.pipelines import load_pipeline

    pipe = load_pipeline(name, torch_dtype=dtype).to(device)
    pipe.set_progress_bar_config(disable=True)
    methods = LPD_METHODS if name == "lpd" else methods
    return Subject(name, dtype, [(m, m) for m in methods], lambda *args: pipeline_call(name, pipe, *args))


def build_llamagen(sizes: dict, device: str, dtype: torch.dtype) -> LlamaGenGPT:
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: 775M weights in seconds on a GPU
        model = LlamaGenGPT(LlamaGenConfig(**sizes, class_dropout_prob=0.1))  # dropout > 0: the CFG null class
    return model.to(dtype).eval()


def llamagen_subject(model: LlamaGenGPT, name: str) -> Subject:
    device = model.output.weight.device

    def call(decoding, batch: int, seed: int, short: bool):
        labels = torch.arange(batch, device=device) % model.config.num_classes
        layout = model.layout()
        layout = layout.truncate(SHORT_POSITIONS) if short else layout
        generator = [torch.Generator().manual_seed(seed + i) for i in range(batch)]
        tokens, stats = generate(model, labels, decoding, SAMPLING, generator, layout=layout)
        return tokens, stats.per_sample()

    head = DraftHead.for_target(model).to(device, model.output.weight.dtype)  # untrained: its cost, not its hits
    methods = [(m, m) for m in METHODS] + [("keyed + head", DecodingConfig(method="keyed", head=head))]
    return Subject(name, model.output.weight.dtype, methods, call)


# --- 1. decodes ------------------------------------------------------------------------------


def first_difference(tokens: torch.Tensor, ar: torch.Tensor) -> int | None:
    """The first step at which some item's tokens leave AR's; None where they are AR's."""
    if torch.equal(tokens, ar):
        return None
    T = min(tokens.shape[1], ar.shape[1])
    differs = (tokens[:, :T] != ar[:, :T]).reshape(tokens.shape[0], T, -1).any(-1).any(0)
    return int(differs.nonzero()[0]) if differs.any() else T


def timed(fn, device: str):
    """(result, seconds, peak MiB) of `fn()`, the device synchronised around it; the peak
    is the GPU's allocated memory during the call (None on a CPU)."""
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    profile = device_profile(device)
    profile.synchronize()
    start = time.perf_counter()
    out = fn()
    profile.synchronize()
    seconds = time.perf_counter() - start
    return out, seconds, torch.cuda.max_memory_allocated(device) / 2**20 if cuda else None


def decode_rows(subject: Subject, batch: int, seed: int, short: bool, device: str, report: Report) -> None:
    """AR's row, then one per method beside it."""
    ar_tokens, ar = None, None
    for method, decoding in subject.methods:
        what = f"{subject.name} batch {batch} {method}"
        if (ar is None and method != "ar") or not report.allows(what, subject.ar_s if ar is None else 2 * ar["call_s"]):
            continue
        try:
            (tokens, stats), seconds, peak = timed(lambda: subject.call(decoding, batch, seed, short), device)
        except Exception as err:
            report.failed(what, err)
            continue
        tokens = tokens.cpu()
        row = dict(model=subject.name, dtype=str(subject.dtype).removeprefix("torch."), batch=batch, method=method,
                   forwards=max(s.forward_passes for s in stats), stats_s=stats[0].wall_time_s, call_s=seconds,
                   peak_mib=peak, device=stats[0].device)
        if ar is None:
            ar_tokens, ar, subject.ar_s = tokens, row, seconds
        else:
            difference = first_difference(tokens, ar_tokens)
            row.update(tokens_as_ar=difference is None, first_difference=difference)
        row.update(ar_forwards=ar["forwards"], ar_stats_s=ar["stats_s"], ar_call_s=ar["call_s"])
        if stats[0].choices is not None:
            row["auto_chose"] = describe_choices(stats[0].choices)
        report.add("decodes", row)


def warm_up(subject: Subject, batch: int, seed: int, report: Report) -> None:
    """One short call of every method: Triton compiles its kernels, CUDA sets up its
    allocator and libraries. A method that fails here fails again in its row, recorded there."""
    for method, decoding in subject.methods:
        if report.allows(f"{subject.name} warm-up {method}"):
            with contextlib.suppress(Exception):
                subject.call(decoding, batch, seed, True)


# --- 2. the keyed kernel, 3. forwards --------------------------------------------------------


def kernel_rows(cases, device: str, seed: int, repeats: int, report: Report) -> None:
    """`gpu_verify_check.run_keyed_case` for each case: Triton against the reference."""
    from gpu_verify_check import run_keyed_case

    generator = torch.Generator(device=device).manual_seed(seed)
    for case in cases:
        what = f"keyed kernel batch {case.batch} L {case.L} V {case.V}"
        if report.allows(what):
            try:
                report.add("kernel", run_keyed_case(case, generator, device=device, repeats=repeats))
            except Exception as err:
                report.failed(what, err)


@torch.inference_mode()
def forward_ms(model: LlamaGenGPT, batch: int, n: int, committed: int, repeats: int) -> float:
    """Median ms of a forward of `n` inputs per sequence after `committed` committed positions (CFG: 2B rows)."""
    device = model.output.weight.device
    labels = torch.arange(batch, device=device) % model.config.num_classes
    session = model.start(labels, guided=True, extra_positions=n)
    V = model.config.vocab_size
    positions = torch.arange(committed, device=device).expand(batch, -1)
    session.forward(torch.randint(V, (batch, committed), device=device), positions)
    session.commit(positions, torch.ones_like(positions, dtype=torch.bool))
    tokens = torch.randint(V, (batch, n), device=device)
    window = committed + torch.arange(n, device=device).expand(batch, -1)
    session.forward(tokens, window)  # warm-up
    return 1000 * statistics.median(timed(lambda: session.forward(tokens, window), str(device))[1] for _ in range(repeats))


# --- the tables ------------------------------------------------------------------------------


def as_ar(row: dict) -> str:
    if "tokens_as_ar" not in row:
        return "(AR)"
    return "yes" if row["tokens_as_ar"] else f"no (from step {row['first_difference']})"


def markdown(result: dict) -> str:
    meta = result["meta"]
    title = "Decoding on " + meta["device"] + (" (dry run: CPU tensors, Triton interpreted)" if meta["dry_run"] else "")
    lines = [f"# {title}", "",
             f"- {meta['date']}: {meta['seconds']:.0f} s of a {meta['budget_s']:.0f} s budget; warm-up: {meta['warm_up']}",
             f"- torch {meta['torch']}, triton {meta['triton']}, CUDA {meta['cuda']}, threads {meta['threads']}",
             f"- {meta['dtype']}; LlamaGen sampling {meta['llamagen_sampling']}",
             f"- batches {', '.join(map(str, meta['batches']))}; seed {meta['seed']} (item i of a batch: seed + i)", ""]
    if meta["dry_run"]:
        lines += ["A dry run: the CUDA profile on CPU tensors with Triton's interpreter, tiny sizes (the shipped calls "
                  "cut short and without SJD, a tiny LlamaGen for XL). It shows what a GPU run prints; its times say "
                  f"nothing of a GPU. Memory: the process's peak resident set, {meta['cpu_max_rss_mib']:.0f} MiB (a CPU "
                  "has no per-call peak).", ""]
    decodes = result["decodes"]
    checked = [r for r in decodes if r["method"] in ("keyed", "auto")]
    verifying = [r for r in decodes if r["model"] != "lpd"]  # LPD verifies nothing
    lines += ["## Each method against AR (same model, batch and seeds, same run)", "",
              f"- keyed and auto gave AR's tokens in {sum(r['tokens_as_ar'] for r in checked)} of {len(checked)} decodes "
              "(SJD and MC-SJD sample the model's distribution, not AR's tokens; LPD samples groups of cells at once)",
              f"- the stats' device line says Triton verification in "
              f"{sum('Triton verification' in r['device'] for r in verifying)} of {len(verifying)} (LPD verifies nothing)",
              "- stats s: the decode (`DecodeStats.wall_time_s`); call s: the whole call, the device synchronised "
              "(auto's first call per model, batch and length includes measuring its cost curve)",
              "- peak: memory allocated on the GPU during the call, weights included", "",
              "| model | dtype | batch | method | tokens = AR | forwards | AR / forwards | stats s | AR s / stats s "
              "| call s | peak MiB | stats' device | auto chose |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in decodes:
        peak = "n/a" if r["peak_mib"] is None else f"{r['peak_mib']:.0f}"
        lines.append(f"| {r['model']} | {r['dtype']} | {r['batch']} | {r['method']} | {as_ar(r)} | {r['forwards']} | "
                     f"{r['ar_forwards'] / r['forwards']:.2f}x | {r['stats_s']:.3f} | {r['ar_stats_s'] / r['stats_s']:.2f}x | "
                     f"{r['call_s']:.3f} | {peak} | {r['device']} | {r.get('auto_chose', '')} |")
    if result["kernel"]:
        lines += ["", f"## Keyed verification: Triton vs PyTorch reference (V = {result['kernel'][0]['V']})", "",
                  "| batch | L | transform | reference ms | triton ms | speed-up | winners agreeing with CPU | windows agreeing |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in result["kernel"]:
            lines.append(f"| {r['batch']} | {r['L']} | {r['transform']} | {r['reference_ms']:.2f} | {r['triton_ms']:.2f} | "
                         f"{r['reference_ms'] / r['triton_ms']:.2f}x | {r['winners_agreeing']:.4f} of {r['winners_compared']} | "
                         f"{r['windows_agreeing']} |")
    if result["forward"]:
        sizes = [k for k in result["forward"][0] if k.isdigit()]
        lines += ["", f"## ms per forward of {result['forward'][0]['model']} (n inputs per sequence, "
                  f"{result['forward'][0]['committed']} positions committed, CFG)", "",
                  "| batch | " + " | ".join(f"n={n}" for n in sizes) + " |", "|---|" + "---|" * len(sizes)]
        for r in result["forward"]:
            lines.append(f"| {r['batch']} | " + " | ".join(f"{r[n]:.2f}" for n in sizes) + " |")
    if result["errors"]:
        lines += ["", "## Errors", "", *(f"- {what}" for what in result["errors"])]
    if result["skipped"]:
        lines += ["", "## Skipped (time budget)", "", *(f"- {what}" for what in result["skipped"])]
    return "\n".join(lines) + "\n"


# --- the run ---------------------------------------------------------------------------------


def forward_rows(model: LlamaGenGPT, name: str, batches: list[int], dry_run: bool, report: Report) -> None:
    committed = min(COMMITTED, model.config.block_size // 2)
    for batch in batches:
        what = f"{name} forwards batch {batch}"
        if report.allows(what):
            try:
                row = dict(model=name, batch=batch, committed=committed)
                row.update({str(n): forward_ms(model, batch, n, committed, 2 if dry_run else 5)
                            for n in ((1, 4) if dry_run else (1, 2, 4, 8, 16, 32, 64))})
                report.add("forward", row)
            except Exception as err:
                report.failed(what, err)


def load(key: str, args, device: str, report: Report) -> Subject | None:
    """A shipped pipeline by its name, or ("llamagen") the XL model (the dry run: tiny), its
    forward rows measured on the way."""
    try:
        if key != "llamagen":
            return load_shipped(key, device, args.shipped_dtype, DRY_RUN_METHODS if args.dry_run else METHODS)
        sizes, name = (TINY, "LlamaGen tiny") if args.dry_run else (XL, "LlamaGen-XL (random)")
        model = build_llamagen(sizes, device, args.llamagen_dtype)
        forward_rows(model, name, args.batches, args.dry_run, report)
        return llamagen_subject(model, name)
    except Exception as err:
        report.failed(f"loading {key}", err)
        return None


def run(args, device: str, report: Report) -> None:
    """The keyed kernel's rows, then every model's decodes, batch by batch (all models at
    the first batch before any at the next)."""
    from gpu_verify_check import KEYED_CASES, Case

    cases = [Case("LlamaGen", 1, 4, 64, top_k=16)] if args.dry_run else [c for c in KEYED_CASES if c.model == "LlamaGen"]
    kernel_rows(cases, device, args.seed, 1 if args.dry_run else 10, report)  # interpreted: ~0.5 s a call
    subjects: dict[str, Subject | None] = {}
    for batch in args.batches:
        for key in (*SHIPPED, "llamagen"):
            if key not in subjects:
                if not report.allows(f"loading {key}", 30.0 if key == "llamagen" else 0.0):  # XL: weights and forward rows
                    continue
                subjects[key] = load(key, args, device, report)
                if subjects[key] is not None and not args.dry_run:
                    warm_up(subjects[key], batch, args.seed, report)
            if subjects[key] is not None:
                decode_rows(subjects[key], batch, args.seed, args.dry_run, device, report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="this CPU, tiny sizes, the CUDA profile with Triton interpreted")
    parser.add_argument("--batches", nargs="+", type=int, default=None, help="default: 1 8 (the dry run: 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=float, default=420.0, help="seconds; later rows are skipped, the tables written")
    parser.add_argument("--out", type=Path, default=None,
                        help="results stem (default benchmarks/results/gpu_e2e, the dry run's gpu_e2e_dry_run)")
    args = parser.parse_args(argv)
    args.batches = args.batches or ([1] if args.dry_run else [1, 8])
    if not args.dry_run and not torch.cuda.is_available():
        print("gpu_e2e: no CUDA device; this check needs one GPU (--dry-run runs it on this CPU)")
        return 2
    if not triton_installed():
        print("gpu_e2e: triton is not installed; pip install triton")
        return 2
    import triton

    os.environ["MMSPEC_CACHE_DIR"] = tempfile.mkdtemp(prefix="mmspec-gpu-e2e-")  # auto measures this device's curves afresh
    device = "cpu" if args.dry_run else "cuda"
    from mmspec.commands.common import resolve_dtype

    args.shipped_dtype = resolve_dtype("auto", torch.device(device))  # bfloat16 on a GPU that computes in it
    args.llamagen_dtype = torch.float32 if args.dry_run else torch.bfloat16
    if args.dry_run:
        from mmspec.kernels.interpreter import quicken_interpreter

        quicken_interpreter()
        torch.set_num_threads(1)  # tiny models: one thread beats two on a busy CPU
    meta = dict(
        date=datetime.datetime.now().astimezone().isoformat(timespec="seconds"), dry_run=args.dry_run,
        device=device_profile(device).hardware, torch=torch.__version__, triton=triton.__version__,
        cuda=torch.version.cuda if torch.cuda.is_available() else "none (no GPU)", python=platform.python_version(),
        dtype=f"shipped pipelines {str(args.shipped_dtype)[6:]}, LlamaGen {str(args.llamagen_dtype)[6:]}",
        threads=torch.get_num_threads(),
        batches=args.batches, seed=args.seed, budget_s=args.budget,
        warm_up="none (dry run)" if args.dry_run else "one short call of each method per model",
        llamagen_sampling=f"CFG {SAMPLING.guidance_scale}, top-k {SAMPLING.top_k}")
    report = Report(args.out or RESULTS / ("gpu_e2e_dry_run" if args.dry_run else "gpu_e2e"), meta, args.budget)
    with forced_profile("cuda") if args.dry_run else contextlib.nullcontext():
        run(args, device, report)
    report.save()
    print(markdown(report.as_dict()))
    print(f"{time.perf_counter() - START:.0f} s; wrote {report.out.with_suffix('.md')} and .json")
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
