"""Peak memory of the Jacobi loop on an Emu3-size layout under ZipAR, without the model.

    PYTHONPATH=. python benchmarks/perf/engine_memory.py            # -> benchmarks/results/engine_memory.{md,json}

A stand-in model returns random logits over Emu3's 184,622-token vocabulary for its
90 x (90 + 1) layout (32,768 visual tokens allowed, the end-of-line column forced), CFG
on, top-k 2048, as Emu3-Gen samples; MC-SJD with window 16 under ZipAR window 8 runs
`--forwards` forwards. Each setting runs in a fresh process, which reports its peak
resident memory (ru_maxrss) and seconds per forward; the stand-in's own logits are
counted too (they are what a real model would return).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

VOCAB, VISUAL, ROWS, COLS = 184_622, 32_768, 90, 90


class RandomLogits:
    """A TokenModel whose logits are random: the engine's own cost, on Emu3's shapes."""

    def __init__(self, seed: int = 0):
        self.generator = torch.Generator().manual_seed(seed)

    def layout(self):
        from mmspec.core.layout import TokenLayout

        allowed = torch.zeros(VOCAB, dtype=torch.bool)
        allowed[VOCAB - VISUAL - 1 : VOCAB - 1] = True
        forced = torch.full((ROWS, COLS + 1), -1)
        forced[:, COLS] = VOCAB - 1  # the end-of-line token
        return TokenLayout.grid((ROWS, COLS + 1), VOCAB, allowed=allowed, forced=forced.flatten())

    def start(self, condition, *, guided: bool, extra_positions: int = 0):
        return RandomSession(self, len(condition), guided)


class RandomSession:
    def __init__(self, model: RandomLogits, batch_size: int, guided: bool):
        self.model, self.batch_size, self.guided, self.prompt_tokens = model, batch_size, guided, None

    def logits(self, n: int):
        from mmspec.core.contracts import GuidedLogits

        draw = lambda: torch.randn(self.batch_size, n, VOCAB, generator=self.model.generator)
        return GuidedLogits(draw(), draw() if self.guided else None)

    def prefill_logits(self):
        if not hasattr(self, "_prefill"):
            self._prefill = self.logits(1)
        return self._prefill

    def forward(self, tokens, positions, segments=None):
        return self.logits(tokens.shape[1])

    def commit(self, positions, mask):
        pass


class Enough(Exception):
    pass


def measure(forwards: int) -> dict:
    """Runs the loop for `forwards` forwards in this process; peak RSS and time."""
    from mmspec.core.sampling import SamplingConfig
    from mmspec.decoding.config import DecodingConfig
    from mmspec.decoding.generate import generate

    torch.set_num_threads(1)
    count = {"n": 0}

    def stop_after(done, total):
        count["n"] += 1
        if count["n"] >= forwards:
            raise Enough

    start = time.perf_counter()
    try:
        generate(RandomLogits(), torch.zeros(1), DecodingConfig.from_name("zipar+mc-sjd", window=16, zipar_window=8),
                 SamplingConfig(guidance_scale=3.0, top_k=2048), torch.Generator().manual_seed(0), on_step=stop_after)
    except Enough:
        pass
    return {"forwards": count["n"], "seconds_per_forward": (time.perf_counter() - start) / count["n"],
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--forwards", type=int, default=40)
    parser.add_argument("--label", default="this engine", help="the row's name")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.forwards)))
        return
    result = json.loads(subprocess.run([sys.executable, __file__, "--child", "--forwards", str(args.forwards)],
                                       capture_output=True, text=True, check=True).stdout)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "engine_memory.json"
    rows = json.loads(path.read_text()) if path.exists() else []
    rows = [r for r in rows if r["label"] != args.label] + [{"label": args.label, **result, "date": time.strftime("%Y-%m-%d")}]
    path.write_text(json.dumps(rows, indent=2) + "\n")
    lines = ["| engine | forwards | peak RSS (GB) | s / forward | date |", "|---|---|---|---|---|"]
    lines += [f"| {r['label']} | {r['forwards']} | {r['peak_rss_gb']:.2f} | {r['seconds_per_forward']:.2f} | {r['date']} |" for r in rows]
    (out / "engine_memory.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
