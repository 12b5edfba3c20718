"""The gate before a draft head goes into the engine: how well each source of drafts for the
slot after the commit front predicts the model there, offline on held-out samples.

    PYTHONPATH=. python benchmarks/draft_head_gate.py                       # the shipped model and head
    PYTHONPATH=. python benchmarks/draft_head_gate.py --pipeline DIR --drafter DIR --samples 32

Held-out AR samples of the pipeline (seeds no training round uses) are scored teacher-forced.
At position t, p is the model's guided distribution given the true prefix; each source gives
a q for the same position:

* stale: what today's carried draft comes from: the model's p at t computed with the token
  at t - 1 replaced by a rejected draft (another token drawn from p at t - 1), 16 positions
  per sample;
* above: a copy of the token one row up (a point mass);
* head, depth k: the head's k-th roll-out step, its front k - 1 positions back, fed the true
  tokens after it (what a roll-out whose drafts were accepted sees: `rollout_logits`).

Two figures per source: sum(min(p, q)), the chance that SJD / MC-SJD accepts a draft drawn
from q (1 - total variation); and the keyed match rate, the chance that q's Gumbel winner
under the slot's noise is p's (each position under the same 16 Gumbel draws for every
source). Writes benchmarks/results/draft_head_gate.{md,json}.
"""

from __future__ import annotations

import argparse

import torch

from mmspec.pipelines.llamagen import LlamaGenPipeline
from mmspec.runs.bench import dated_environment, write_results
from mmspec.runs.train_drafter import draw_samples, load_drafter, rollout_logits, target_batch

HELD_OUT_SEED = 2**31 - 1  # training rounds use seed * 1_000_003 + round
GUMBELS = 16


def scores(p: torch.Tensor, q: torch.Tensor, gumbel: torch.Tensor) -> tuple[float, float]:
    """Mean sum(min(p, q)) and the Gumbel-coupled match rate of `p, q [N, V]` under `gumbel [G, N, V]`."""
    overlap = torch.minimum(p, q).sum(-1).mean()
    win_p = (p.clamp_min(1e-30).log() + gumbel).argmax(-1)
    win_q = (q.clamp_min(1e-30).log() + gumbel).argmax(-1)
    return float(overlap), float((win_p == win_q).float().mean())


def stale_probs(model, tokens, labels, log_p, positions, scale, temperature, generator) -> torch.Tensor:
    """p at each of `positions [N, S]` (t) with the token at t - 1 replaced by another draw
    from p at t - 1: `[N, S, V]`."""
    N, S = positions.shape
    rows = torch.arange(N)[:, None].expand(N, S).reshape(-1)
    t = positions.reshape(-1)
    corrupted = tokens[rows].clone()
    before = log_p[rows, t - 1].exp()
    before[torch.arange(len(t)), tokens[rows, t - 1]] = 0  # a rejected draft is another token
    corrupted[torch.arange(len(t)), t - 1] = torch.multinomial(before, 1, generator=generator)[:, 0]
    out = []
    for chunk in torch.arange(len(t)).split(256):
        _, lp = target_batch(model, corrupted[chunk], labels[rows[chunk]], [-1], scale, temperature)
        out.append(lp[chunk - chunk[0], t[chunk]].exp())
    return torch.cat(out).view(N, S, -1)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", default="default")
    parser.add_argument("--drafter", help="a head folder (default: the pipeline's own)")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    pipe = LlamaGenPipeline.from_pretrained(args.pipeline)
    model = pipe.transformer.eval()
    head = load_drafter(args.drafter, model) if args.drafter else pipe.drafter
    if head is None:
        raise SystemExit(f"{args.pipeline} has no drafter; give --drafter DIR")
    sampling = pipe.default_sampling
    scale, temperature = float(sampling["guidance_scale"]), float(sampling["temperature"]) or 1.0
    tokens, labels = draw_samples(pipe, args.samples, HELD_OUT_SEED)
    generator = torch.Generator().manual_seed(0)
    width = model.config.grid_size
    T = tokens.shape[1]
    results = {}
    with torch.no_grad():
        hidden, log_p = target_batch(model, tokens, labels, head.layers, scale, temperature)
        p = log_p.exp()  # [N, T, V]
        gumbel = -torch.log(-torch.log(torch.rand(GUMBELS, *p.shape, generator=generator).clamp(1e-12, 1 - 1e-12)))
        rolled = rollout_logits(head, torch.cat([tokens, tokens]), head.fused(hidden), args.depth)
        positions = torch.stack([torch.randperm(T - width, generator=generator)[:16] + width for _ in range(len(tokens))])
        stale = stale_probs(model, tokens, labels, log_p, positions, scale, temperature, generator)
        pick = lambda x: x.gather(1, positions[..., None].expand(-1, -1, x.shape[-1]))  # noqa: E731
        rows_at = lambda g: g.gather(2, positions[None, ..., None].expand(GUMBELS, -1, -1, g.shape[-1]))  # noqa: E731
        results["stale (today's carried draft)"] = scores(pick(p), stale, rows_at(gumbel))
        above = torch.nn.functional.one_hot(tokens[:, :-width], p.shape[-1]).float()
        results["copy from above"] = scores(pick(p), pick(torch.cat([torch.zeros_like(p[:, :width]), above], 1)), rows_at(gumbel))
        N = len(tokens)
        for k, logits in enumerate(rolled, 1):
            guided = logits[N:] + scale * (logits[:N] - logits[N:]) if scale != 1 else logits[:N]
            q = (guided / temperature).softmax(-1)  # row j predicts position j + 1
            q_at = torch.cat([torch.zeros_like(p[:, :1]), q], 1)
            results[f"head, depth {k}"] = scores(pick(p), pick(q_at), rows_at(gumbel))
    env = dated_environment()
    lines = [
        "# draft_head_gate", "",
        f"{args.samples} held-out AR samples of `{args.pipeline}` (guidance {scale}, temperature {temperature}), "
        f"16 positions each from the second row on; {GUMBELS} Gumbel draws per position; torch on {args.threads} threads, "
        f"{env['date']}, commit {env['commit']}.", "",
        "| draft source | sum(min(p, q)): SJD acceptance | keyed match rate |", "|---|---|---|",
    ]
    lines += [f"| {name} | {a:.3f} | {m:.3f} |" for name, (a, m) in results.items()]
    write_results(args.out, "draft_head_gate", "\n".join(lines), {"results": results, "args": vars(args), **env})
    print("\n".join(lines))


if __name__ == "__main__":
    main()
