"""Checks the Triton verification kernel against its PyTorch reference on a GPU, and times both.

    PYTHONPATH=. python benchmarks/gpu_verify_check.py [--only probabilistic|keyed]

Sizes: LlamaGen (V = 16384, window L in {16, 32}, batch 1-16; CFG is combined before
verification, so N = batch windows of S = L + 1 slots, top-k 2000) and Emu3 (logits over
the whole 184,622-token vocabulary with the 32,768 image tokens allowed, top-k 2048). Each
row verifies random windows (dense q near p, 20% of slots without a draft) and reports:
- ref / triton ms: median time of `verify_reference` and `verify_triton` on the GPU;
- max |dp|: the kernel's p against the reference transform on the GPU;
- same-p: the kernel's decisions against `verify_reference` on CPU fed the kernel's own p
  (must be identical: this is the exactness check);
- end-to-end: windows whose decisions match the reference run from the logits on the GPU
  (a window may differ where a uniform lies within float32 rounding of its threshold).
Keyed rows (the exact-rule sizes above) time `verify_keyed_reference` and
`verify_keyed_triton` on the GPU (drafts: the winners at 80% of slots, else none) and
report the fraction of slots whose winner (every slot with a p) is the one the reference
finds on CPU from the same logits and keys (must be ~1.0: float64 log may differ by an ulp
between libdevice and the CPU, which moves a winner only on a near-tie), and the windows
whose accepted count, run length and tokens match that CPU reference.
Writes benchmarks/results/gpu_verify_check.{md,json} with the device, versions and seed.
Meant to take well under 5 minutes on one GPU: it stops adding rows after 4 minutes.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

SEED = 0
TIME_BUDGET_S = 240.0
RESULTS = Path(__file__).parent / "results"
EMU3_VOCAB, EMU3_IMAGE_TOKENS = 184_622, 32_768


@dataclass
class Case:
    model: str
    batch: int
    L: int
    V: int
    rule: str = "exact"
    coupling: bool = True
    top_k: int = 0
    top_p: float = 1.0
    allowed_tokens: int | None = None  # the last ids of the vocabulary are allowed


CASES = [
    *(Case("LlamaGen", b, L, 16384, top_k=2000) for L in (16, 32) for b in (1, 4, 16)),
    Case("LlamaGen", 4, 16, 16384, top_k=2000, top_p=0.9),
    Case("LlamaGen", 4, 16, 16384, rule="lantern", coupling=False, top_k=2000),
    Case("LlamaGen", 4, 16, 16384, rule="gsd", coupling=False, top_k=2000),
    *(Case("Emu3", b, 16, EMU3_VOCAB, top_k=2048, allowed_tokens=EMU3_IMAGE_TOKENS) for b in (1, 4, 16)),
    Case("Emu3", 4, 32, EMU3_VOCAB, top_k=2048, allowed_tokens=EMU3_IMAGE_TOKENS),
]
KEYED_CASES = [case for case in CASES if case.rule == "exact"]  # keyed verification has no rule


def make_inputs(case: Case, generator: torch.Generator, device: str) -> dict:
    """Random windows on `device`: CFG-combined logits, dense q near p, drafts from q."""
    from mmspec.core.sampling import SamplingConfig, classifier_free_guidance, transform

    N, S, V = case.batch, case.L + 1, case.V
    cond = torch.randn(N, S, V, generator=generator, device=device) * 3
    uncond = cond + torch.randn(N, S, V, generator=generator, device=device)
    logits = classifier_free_guidance(uncond, cond, 4.0)
    allowed = None
    if case.allowed_tokens is not None:
        allowed = torch.zeros(N, S, V, dtype=torch.bool, device=device)
        allowed[..., V - case.allowed_tokens :] = True
    noisy = logits + torch.randn(N, S, V, generator=generator, device=device)
    q = transform(noisy, SamplingConfig(temperature=1.0, top_k=case.top_k, top_p=case.top_p), allowed)
    drafts = torch.multinomial(q.view(-1, V), 1, generator=generator).view(N, S)
    drafts[torch.rand(N, S, generator=generator, device=device) < 0.2] = -1
    return dict(
        target_probs=None, draft_probs=q, draft_tokens=drafts,
        num_slots=torch.randint(1, S + 1, (N,), generator=generator, device=device),
        accept_uniforms=torch.rand(N, S, generator=generator, device=device, dtype=torch.float64),
        sample_uniforms=torch.rand(N, S, generator=generator, device=device, dtype=torch.float64),
        target_logits=logits, sampling=SamplingConfig(top_k=case.top_k, top_p=case.top_p), allowed=allowed,
    )


def make_rule(case: Case, generator: torch.Generator, device: str):
    from mmspec.core.rules import ExactRule, GSDRule, LanternRule

    if case.rule == "exact":
        return ExactRule()
    embeddings = torch.randn(case.V, 8, generator=generator, device=device) * 0.3  # a VQ codebook's scale
    return (LanternRule(k=1000, delta=0.1) if case.rule == "lantern" else GSDRule()).bind(embeddings)


def median_ms(fn, repeats: int = 10, device: str = "cuda") -> float:
    """Median ms of `fn()` over `repeats` calls after a warm-up: CUDA events on a GPU, the
    clock elsewhere (`gpu_e2e.py --dry-run` runs the kernel interpreted on CPU tensors)."""
    fn()  # compile / warm up
    if torch.device(device).type != "cuda":
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(1000 * (time.perf_counter() - start))
        return statistics.median(times)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def decisions(out) -> tuple:
    return out.accepted.cpu(), out.run_length.cpu(), out.tokens.cpu()


def run_case(case: Case, generator: torch.Generator, device: str = "cuda") -> dict:
    from mmspec.kernels.verify_reference import verify_reference
    from mmspec.kernels.verify_triton import verify_triton

    inputs = make_inputs(case, generator, device)
    rule = make_rule(case, generator, device)
    positional = [inputs[k] for k in ("target_probs", "draft_probs", "draft_tokens", "num_slots", "accept_uniforms", "sample_uniforms")]
    transform = {k: inputs[k] for k in ("target_logits", "sampling", "allowed")}
    reference = verify_reference(*positional, rule=rule, coupling=case.coupling, **transform)
    kernel = verify_triton(*positional, rule=rule, coupling=case.coupling, **transform)

    # exactness: the reference on CPU, fed the kernel's own p, must decide the same
    cpu = [t.cpu() if isinstance(t, torch.Tensor) else t for t in positional]
    cpu[0] = kernel.target_probs.cpu()
    same_p = verify_reference(*cpu, rule=rule, coupling=case.coupling)  # the rule's tables follow p to the CPU
    same = all(torch.equal(a, b) for a, b in zip(decisions(kernel), decisions(same_p)))
    end_to_end = torch.ones(case.batch, dtype=torch.bool)
    for a, b in zip(decisions(kernel), decisions(reference)):
        end_to_end &= (a == b).view(case.batch, -1).all(-1)

    return dict(
        model=case.model, batch=case.batch, L=case.L, V=case.V, rule=case.rule + ("+coupling" if case.coupling else ""),
        transform=f"top_k={case.top_k} top_p={case.top_p}" + (f" allowed={case.allowed_tokens}" if case.allowed_tokens else ""),
        reference_ms=median_ms(lambda: verify_reference(*positional, rule=rule, coupling=case.coupling, **transform)),
        triton_ms=median_ms(lambda: verify_triton(*positional, rule=rule, coupling=case.coupling, **transform)),
        max_abs_dp=float((kernel.target_probs - reference.target_probs).abs().max()),
        same_p_decisions_identical=same,
        end_to_end_windows_agreeing=f"{int(end_to_end.sum())}/{case.batch}",
    )


def run_keyed_case(case: Case, generator: torch.Generator, device: str = "cuda", repeats: int = 10) -> dict:
    from mmspec.core.noise import Noise
    from mmspec.kernels.verify_keyed import verify_keyed_reference
    from mmspec.kernels.verify_keyed_triton import verify_keyed_triton

    inputs = make_inputs(case, generator, device)
    logits, allowed, sampling, num_slots = (inputs[k] for k in ("target_logits", "allowed", "sampling", "num_slots"))
    N, S = logits.shape[:2]
    noise = Noise.from_generator(torch.Generator().manual_seed(SEED), batch_size=N, device=device)
    rows = torch.arange(N, device=device)
    positions = torch.randint(0, 4096, (N, 1), generator=generator, device=device) + torch.arange(S, device=device)
    keyed = dict(noise=noise, rows=rows, positions=positions, sampling=sampling, allowed=allowed)
    on_cpu = dict(noise=Noise(noise.keys.cpu()), rows=rows.cpu(), positions=positions.cpu(), sampling=sampling,
                  allowed=None if allowed is None else allowed.cpu())
    logits_cpu = logits.cpu()

    # winners of every slot: all slots have a p, no drafts, so the tokens are the winners
    full, none = torch.full((N,), S, device=device), torch.full((N, S), -1, device=device)
    winners = verify_keyed_triton(logits, none, full, **keyed).tokens.cpu()
    cpu_winners = verify_keyed_reference(logits_cpu, none.cpu(), full.cpu(), **on_cpu).tokens
    agreeing = int((winners == cpu_winners).sum())

    # decisions: drafts that follow the winners for a while
    drafts = torch.where(torch.rand(N, S, generator=generator, device=device) < 0.8, winners.to(device), none)
    kernel = verify_keyed_triton(logits, drafts, num_slots, **keyed)
    reference = verify_keyed_reference(logits_cpu, drafts.cpu(), num_slots.cpu(), **on_cpu)
    windows = torch.ones(N, dtype=torch.bool)
    for a, b in zip(decisions(kernel), decisions(reference)):
        windows &= (a == b).view(N, -1).all(-1)

    return dict(
        model=case.model, batch=case.batch, L=case.L, V=case.V,
        transform=f"top_k={case.top_k} top_p={case.top_p}" + (f" allowed={case.allowed_tokens}" if case.allowed_tokens else ""),
        reference_ms=median_ms(lambda: verify_keyed_reference(logits, drafts, num_slots, **keyed), repeats, device),
        triton_ms=median_ms(lambda: verify_keyed_triton(logits, drafts, num_slots, **keyed), repeats, device),
        winners_agreeing=agreeing / (N * S), winners_compared=N * S,
        mean_accepted=float(reference.accepted.double().mean()),
        windows_agreeing=f"{int(windows.sum())}/{N}",
    )


def write_results(rows: list[dict], meta: dict, keyed_rows: list[dict] = ()) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "gpu_verify_check.json").write_text(json.dumps(dict(meta, rows=rows, keyed_rows=list(keyed_rows)), indent=2))
    head = "| model | batch | L | V | rule | transform | reference ms | triton ms | speed-up | max abs dp | same-p decisions | end-to-end |"
    lines = [f"# verify: Triton vs reference on {meta['device']}", "",
             f"torch {meta['torch']}, triton {meta['triton']}, CUDA {meta['cuda']}, seed {meta['seed']}", "",
             head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['L']} | {r['V']} | {r['rule']} | {r['transform']} | {r['reference_ms']:.2f} | "
            f"{r['triton_ms']:.2f} | {r['reference_ms'] / r['triton_ms']:.2f}x | {r['max_abs_dp']:.1e} | "
            f"{'identical' if r['same_p_decisions_identical'] else 'DIFFERENT'} | {r['end_to_end_windows_agreeing']} |"
        )
    if keyed_rows:
        head = ("| model | batch | L | V | transform | reference ms | triton ms | speed-up | winners agreeing with CPU | "
                "mean accepted | windows agreeing with CPU |")
        lines += ["", "## keyed verify: Triton (noise made in the kernel) vs reference", "",
                  head, "|" + "---|" * (head.count("|") - 1)]
        for r in keyed_rows:
            lines.append(
                f"| {r['model']} | {r['batch']} | {r['L']} | {r['V']} | {r['transform']} | {r['reference_ms']:.2f} | "
                f"{r['triton_ms']:.2f} | {r['reference_ms'] / r['triton_ms']:.2f}x | {r['winners_agreeing']:.4f} "
                f"of {r['winners_compared']} | {r['mean_accepted']:.2f} | {r['windows_agreeing']} |"
            )
    (RESULTS / "gpu_verify_check.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("probabilistic", "keyed"), help="run one kind of rows only")
    only = parser.parse_args(argv).only
    if not torch.cuda.is_available():
        print("gpu_verify_check: no CUDA device; this check needs one GPU (the CPU tests run the kernel interpreted)")
        return 2
    try:
        import triton
    except ImportError:
        print("gpu_verify_check: triton is not installed; pip install triton")
        return 2
    torch.manual_seed(SEED)
    generator = torch.Generator(device="cuda").manual_seed(SEED)
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                cuda=torch.version.cuda, python=platform.python_version(), seed=SEED)
    start, rows, keyed_rows = time.perf_counter(), [], []
    plan = [(case, run_case, rows) for case in CASES if only != "keyed"]
    plan += [(case, run_keyed_case, keyed_rows) for case in KEYED_CASES if only != "probabilistic"]
    for case, run, out in plan:
        if time.perf_counter() - start > TIME_BUDGET_S:
            print(f"time budget of {TIME_BUDGET_S:.0f} s spent: skipping {run.__name__} {case}")
            continue
        out.append(run(case, generator))
        print(json.dumps(out[-1]), flush=True)
    write_results(rows, meta, keyed_rows)
    ok = all(r["same_p_decisions_identical"] and r["max_abs_dp"] <= 1e-5 for r in rows)
    ok &= all(r["winners_agreeing"] >= 0.999 for r in keyed_rows)
    print(f"{'OK' if ok else 'FAILED'}: {len(rows) + len(keyed_rows)} rows in {time.perf_counter() - start:.0f} s, see {RESULTS / 'gpu_verify_check.md'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
