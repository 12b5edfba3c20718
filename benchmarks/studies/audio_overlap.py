"""Why Jacobi decoding accepts few steps a forward on the shipped speech model: how much a
step's distribution moves when the step before it is redrawn.

On AR samples, for every step t and codebook k: the overlap `1 - TV(p, p')` between the
step's distribution given the sampled prefix (p) and given the same prefix with step t-1
redrawn from its own distribution (p'). With coupled drafts (MC-SJD) the overlap is the
chance that a draft made before its predecessor changed is still accepted after; a step
needs all its K codebooks, so its overlap is the product over k (the K heads are
independent given the prefix, and so are their acceptance draws).

    PYTHONPATH=. python benchmarks/studies/audio_overlap.py      # ~2 min on 1 CPU thread

Writes `benchmarks/results/audio_overlap.md`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from tqdm import tqdm

from mmspec.assets import SPEECH_ASSETS
from mmspec.io.files import atomic_write
from mmspec.runs.bench import environment
from mmspec.core.contracts import GuidedLogits
from mmspec.core.sampling import SamplingConfig, target_probs
from mmspec.pipelines.audio import SpeechPipeline

REPO = Path(__file__).resolve().parents[2]


@torch.no_grad()
def next_step_probs(pipe: SpeechPipeline, steps: torch.Tensor, word_ids: torch.Tensor) -> torch.Tensor:
    """`steps [N, T, K]` -> the distribution `[N, T, K, V + 1]` of each step given the steps
    before it, as the engine samples it: the pipeline's session and default sampling."""
    N, T, _ = steps.shape
    lm = pipe.token_model(T)
    session = lm.start(word_ids, guided=True)
    rest, first = session.forward(steps[:, :-1], torch.arange(T - 1).expand(N, -1)), session.prefill_logits()
    logits = GuidedLogits(torch.cat([first.cond, rest.cond], 1), torch.cat([first.uncond, rest.uncond], 1))
    positions = torch.arange(T).expand(N, -1)
    return target_probs(logits, positions, SamplingConfig(**pipe.default_sampling), lm.layout().allowed_at(positions))


def overlaps(pipe: SpeechPipeline, word: str, seed: int) -> torch.Tensor:
    """`[T - 1, K]` overlaps of steps 1..T-1 of one AR clip (NaN at the pattern's pad slots)."""
    steps = pipe(word, decoding="ar", generator=torch.Generator().manual_seed(seed)).tokens  # [1, T, K]
    T, pad = steps.shape[1], pipe.decoder.config.vocab_size
    word_ids = pipe.condition.word_ids([word])
    p = next_step_probs(pipe, steps, word_ids)[0]  # p[t]: step t given steps < t
    redrawn = steps.repeat(T - 1, 1, 1)  # row t-1: step t-1 redrawn
    generator = torch.Generator().manual_seed(seed)
    for t in range(1, T):
        redrawn[t - 1, t - 1] = torch.multinomial(p[t - 1], 1, generator=generator)[:, 0]  # pad slots: pad again
    p_redrawn = next_step_probs(pipe, redrawn, word_ids.repeat(T - 1))
    t = torch.arange(1, T)
    overlap = 1 - 0.5 * (p_redrawn[t - 1, t] - p[t]).abs().sum(-1)  # [T - 1, K]
    return overlap.masked_fill(steps[0, 1:] == pad, float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", default=str(SPEECH_ASSETS))
    parser.add_argument("--per-word", type=int, default=5, help="AR clips per word (default 5)")
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--out-dir", default=str(REPO / "benchmarks" / "results"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    pipe = SpeechPipeline.from_pretrained(args.pipeline)
    pipe.set_progress_bar_config(disable=True)
    words = [w for w in pipe.words for _ in range(args.per_word)]
    rows = torch.stack([overlaps(pipe, w, args.seed + i) for i, w in enumerate(tqdm(words, desc="clips"))])
    per_codebook = rows.nanmean((0, 1))
    full = ~rows.isnan().any(-1)  # steps with no pad slot: all K codebooks sampled
    per_step = rows.nan_to_num(1.0).prod(-1)[full]
    lines = ["# audio_overlap", "", f"{args.pipeline}: {len(words)} AR clips (seeds {args.seed}+), sampling {pipe.default_sampling}; "
             f"run: {environment()}", "",
             "| | " + " | ".join(f"codebook {k}" for k in range(len(per_codebook))) + " | a whole step (product) |",
             "|---|" + "---|" * (len(per_codebook) + 1),
             "| overlap 1 - TV after a redrawn predecessor | " + " | ".join(f"{float(v):.3f}" for v in per_codebook)
             + f" | {float(per_step.mean()):.3f} |"]
    path = Path(args.out_dir) / "audio_overlap.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: tmp.write_text("\n".join(lines) + "\n"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
