"""A sequence that stops changes nothing in its batch mates: the shipped image model, classes
0 and 3 in one batch (a generator each), a stop token that only the first sequence emits;
is the second sequence what it is decoded alone with its own generator?

    PYTHONPATH=. python benchmarks/studies/batch_mates.py       # 6 seeds x 3 stop tokens x 6 methods, ~3 min

For each seed, the stop tokens are the first three tokens of the first sequence's AR sample
(class 0) that the second's (class 3) never holds, so only the first sequence stops early.
Sampled at the pipeline's defaults (temperature 1, CFG 3), one thread. Writes
benchmarks/results/batch_mates.{md,json}.
"""

from __future__ import annotations

import torch

from mmspec.assets import DEFAULT_ASSETS
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from mmspec.pipelines import load_pipeline
from mmspec.pipelines.checks import sampling_config
from mmspec.runs.bench import dated_environment, write_results

METHODS = {
    "auto": DecodingConfig.from_name("auto"),
    "keyed (window 16, from above)": DecodingConfig.from_name("keyed", init="above"),
    "mc-sjd": DecodingConfig.from_name("mc-sjd"),
    "sjd (from above)": DecodingConfig.from_name("sjd", init="above"),
    "zipar+mc-sjd": DecodingConfig.from_name("zipar+mc-sjd"),
    "ar": DecodingConfig.from_name("ar"),
}


def main() -> None:
    torch.set_num_threads(1)
    pipe = load_pipeline(DEFAULT_ASSETS)
    model, sampling = pipe.transformer, sampling_config(pipe.default_sampling)
    layout = model.layout(token_embeddings=pipe.vqvae.codebook)
    gens = lambda *seeds: [torch.Generator().manual_seed(s) for s in seeds]  # noqa: E731
    rows = {name: [0, 0] for name in METHODS}  # unchanged, cases
    for seed in range(6):
        first, _ = generate(model, torch.tensor([0]), "ar", sampling, gens(seed), layout=layout)
        second, _ = generate(model, torch.tensor([3]), "ar", sampling, gens(100 + seed), layout=layout)
        stops = [t for t in dict.fromkeys(first[0, 1:].tolist()) if t not in set(second[0].tolist())][:3]
        for stop in stops:
            for name, config in METHODS.items():
                both, _ = generate(model, torch.tensor([0, 3]), config, sampling, gens(seed, 100 + seed), layout=layout,
                                   stop_tokens=[stop])
                alone, _ = generate(model, torch.tensor([3]), config, sampling, gens(100 + seed), layout=layout,
                                    stop_tokens=[stop])
                rows[name][0] += int(torch.equal(both[1], alone[0]))
                rows[name][1] += 1
        print(seed, {name: f"{same}/{n}" for name, (same, n) in rows.items()}, flush=True)
    env = dated_environment()
    lines = [f"# A batch mate that stops ({env['date']}, commit {env['commit']})", "",
             "Shipped image model, classes 0 and 3 in one batch (a generator each), one thread, the pipeline's sampling; "
             "stop tokens that only the first sequence emits (3 per seed, seeds 0-5). Unchanged: the second sequence equals "
             "itself decoded alone with its generator.", "",
             "| method | second sequence unchanged |", "|---|---|"]
    lines += [f"| {name} | {same} of {n} |" for name, (same, n) in rows.items()]
    write_results("benchmarks/results", "batch_mates", "\n".join(lines), {"environment": env, "rows": rows})


if __name__ == "__main__":
    main()
