"""The gate before a draft head goes into the engine: how well each source of drafts for the
slot after the commit front predicts the model there, offline on held-out samples.

    PYTHONPATH=. python benchmarks/draft_head_gate.py                       # the shipped model and head
    PYTHONPATH=. python benchmarks/draft_head_gate.py --pipeline DIR --drafter DIR --samples 32

Held-out AR samples of the pipeline (seeds no training round uses) are scored teacher-forced.
At position t, p is the model's guided distribution given the true prefix; each source gives
a q for the same position, the front being t - 1, where a draft was rejected (a stand-in:
another token drawn from p at t - 1), 16 positions per sample:

* stale: what the carried draft comes from: the model's p at t with the stand-in at t - 1
  (in the engine the real rejected drafts are likelier to mislead: `draft_heads.py` counts
  the first drafts accepted there);
* above: a copy of the token one row up (a point mass);
* the head's front query, reading the stand-in and the model's hidden state on it;
* the head on EAGLE's inputs alone, and its roll-out steps k = 2, 3 (the front k - 1
  positions back, then the true tokens with its own features: `rollout_logits`).

Two figures per source: sum(min(p, q)), the chance that SJD / MC-SJD accepts a draft drawn
from q (1 - total variation); and the keyed match rate, the chance that q's Gumbel winner
under the slot's noise is p's (each position under the same 16 Gumbel draws for every
source). Writes benchmarks/results/draft_head_gate.{md,json}.
"""

from __future__ import annotations

import torch

from benchmarks.draft_heads import pipeline_and_head
from mmspec.core.contracts import Rejected
from mmspec.runs.bench import dated_environment, write_results
from mmspec.runs.train_drafter import draw_samples, front_outputs, rollout_logits, target_batch

HELD_OUT_SEED = 2**31 - 1  # training rounds use seed * 1_000_003 + round
GUMBELS = 16


def scores(p: torch.Tensor, q: torch.Tensor, gumbel: torch.Tensor) -> tuple[float, float]:
    """Mean sum(min(p, q)) and the Gumbel-coupled match rate of `p, q [N, V]` under `gumbel [G, N, V]`."""
    overlap = torch.minimum(p, q).sum(-1).mean()
    win_p = (p.clamp_min(1e-30).log() + gumbel).argmax(-1)
    win_q = (q.clamp_min(1e-30).log() + gumbel).argmax(-1)
    return float(overlap), float((win_p == win_q).float().mean())


def stale(model, head, tokens, labels, log_p, positions, scale, temperature, generator) -> tuple[torch.Tensor, Rejected]:
    """At each of `positions [N, S]` (t): p at t with the token at t - 1 replaced by a
    stand-in for a rejected draft (another draw from p at t - 1), `[N, S, V]`, and what the
    head reads of that draft at t - 1 (`Rejected`, fused features, rows of both CFG halves)."""
    N, S = positions.shape
    rows = torch.arange(N)[:, None].expand(N, S).reshape(-1)
    t = positions.reshape(-1)
    corrupted = tokens[rows].clone()
    before = log_p[rows, t - 1].exp()
    before[torch.arange(len(t)), tokens[rows, t - 1]] = 0  # a rejected draft is another token
    drafts = torch.multinomial(before, 1, generator=generator)[:, 0]
    corrupted[torch.arange(len(t)), t - 1] = drafts
    probs, features = [], []
    for chunk in torch.arange(len(t)).split(256):
        hidden, lp = target_batch(model, corrupted[chunk], labels[rows[chunk]], head.layers, scale, temperature)
        probs.append(lp[chunk - chunk[0], t[chunk]].exp())
        n = len(chunk)  # hidden: [2n, T, D]; row t is the hidden state on the draft at t - 1
        features.append(hidden[torch.arange(2 * n), torch.cat([t[chunk], t[chunk]])].view(2, n, -1))
    features = head.fused(torch.cat(features, 1)).view(2, N, S, -1).flatten(0, 1)  # [2N, S, dim]
    drafts = drafts.view(N, S)
    return torch.cat(probs).view(N, S, -1), Rejected(torch.cat([drafts, drafts]), features)


def guided_probs(logits: torch.Tensor, scale: float, temperature: float) -> torch.Tensor:
    """q `[N, ..., V]` from the head's logits of both CFG halves `[2N, ..., V]`."""
    N = len(logits) // 2
    guided = logits[N:] + scale * (logits[:N] - logits[N:]) if scale != 1 else logits[:N]
    return (guided / temperature).softmax(-1)


def main(argv=None) -> None:
    args, pipe, head = pipeline_and_head(__doc__, samples=64, threads=2, argv=argv, depth=3)
    model = pipe.transformer.eval()
    sampling = pipe.default_sampling
    scale, temperature = float(sampling["guidance_scale"]), float(sampling["temperature"]) or 1.0
    tokens, labels = draw_samples(pipe, args.samples, HELD_OUT_SEED)
    generator = torch.Generator().manual_seed(0)
    width = model.config.grid_size
    N, T = tokens.shape
    results = {}
    with torch.no_grad():
        hidden, log_p = target_batch(model, tokens, labels, head.layers, scale, temperature)
        p = log_p.exp()  # [N, T, V]
        positions = torch.stack([torch.randperm(T - width, generator=generator)[:16] + width for _ in range(N)])
        pick = lambda x: x.gather(1, positions[..., None].expand(-1, -1, x.shape[-1]))  # noqa: E731
        p_at = pick(p)
        gumbel = -torch.log(-torch.log(torch.rand(GUMBELS, *p_at.shape, generator=generator).clamp(1e-12, 1 - 1e-12)))
        stale_p, rejected = stale(model, head, tokens, labels, log_p, positions, scale, temperature, generator)
        results["stale: p after a rejected token (stand-in)"] = scores(p_at, stale_p, gumbel)
        above = torch.nn.functional.one_hot(tokens[:, :-width], p.shape[-1]).float()
        results["copy from above"] = scores(p_at, pick(torch.cat([torch.zeros_like(p[:, :width]), above], 1)), gumbel)
        rows, features = torch.cat([tokens, tokens]), head.fused(hidden)
        _, _, front = front_outputs(head, rows, features, rejected, torch.cat([positions, positions]) - 1)
        results["head reading the rejected draft (front query)"] = scores(p_at, guided_probs(head.read_out(front), scale, temperature), gumbel)
        for k, logits in enumerate(rollout_logits(head, rows, features, args.depth), 1):
            q = guided_probs(logits, scale, temperature)  # row j predicts position j + 1
            name = "head, EAGLE inputs alone" if k == 1 else f"head, roll-out step {k} (EAGLE inputs)"
            results[name] = scores(p_at, pick(torch.cat([torch.zeros_like(p[:, :1]), q], 1)), gumbel)
    env = dated_environment()
    lines = [
        "# draft_head_gate", "",
        f"{args.samples} held-out AR samples of `{args.pipeline}` (guidance {scale}, temperature {temperature}), 16 positions "
        f"each from the second row on, teacher-forced; {GUMBELS} Gumbel draws per position, the same for every source; torch "
        f"on {args.threads} threads, {env['date']}, commit {env['commit']}. The rejected draft at the front is a stand-in: "
        "another token drawn from p there.", "",
        "| draft source for the slot after the front | sum(min(p, q)): SJD acceptance | keyed match rate |", "|---|---|---|",
    ]
    lines += [f"| {name} | {a:.3f} | {m:.3f} |" for name, (a, m) in results.items()]
    write_results(args.out, "draft_head_gate", "\n".join(lines), {"results": results, "args": vars(args), **env})
    print("\n".join(lines))


if __name__ == "__main__":
    main()
