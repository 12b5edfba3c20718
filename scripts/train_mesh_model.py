"""Trains the shipped mesh model on one CPU thread and exports it to mmspec/assets/mesh/.

Two stages that checkpoint to the work directory and resume from there when the command
is rerun:

1. `opt`: a class-conditional OPT (transformers `OPTForCausalLM`) on MeshXL sequences of
   the procedural meshes of `mmspec.datasets.meshes`. The prompt is the class token
   (`131 + label`, after MeshXL's 131 ids) and `<bos>`; the model learns the coordinates
   and `<eos>`. Meshes are drawn fresh for every batch (128 at a time, sorted by length
   into 8 batches so that little is padding), from the batch index, so a resumed run
   sees the same data.
2. `classifier`: the point-cloud judge of `mmspec.metrics.mesh_classifier`, on surface
   samples of the same dataset.

Then `export` writes a saved `MeshPipeline`: the OPT as a MeshXL-format folder (`model/`:
`config.json`, `model.safetensors`), `classifier/` and `model_index.json`.

    PYTHONPATH=. python scripts/train_mesh_model.py            # or rerun to resume
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if not __package__:  # run as `python scripts/train_mesh_model.py`: as with PYTHONPATH=., the repository root
    sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
from transformers import OPTForCausalLM

from mmspec.assets import MESH_ASSETS
from mmspec.datasets.meshes import CLASS_NAMES, NUM_CLASSES, SPLIT_SEEDS, sample_mesh
from mmspec.metrics.mesh_classifier import MeshClassifier, MeshClassifierConfig, sample_points
from mmspec.models.adapters.mesh_opt import mesh_opt_config
from mmspec.tokenizers.mesh import PAD, VOCAB_SIZE, mesh_to_tokens
from scripts._training import Stage, script_parser, start, train_classifier_stage

OPT_STEPS, OPT_BATCH, OPT_LR, POOL = 3500, 16, 1e-3, 8  # POOL batches drawn and length-sorted at a time
CLF_STEPS, CLF_BATCH, CLF_LR, CLF_MESHES = 600, 64, 2e-3, 4000


def pool_batches(pool: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The POOL batches of pool `pool`: (ids `[B, L]` right-padded, attention mask)."""
    first = pool * POOL * OPT_BATCH
    seqs = []
    for i in range(first, first + POOL * OPT_BATCH):
        label = int(np.random.default_rng(SPLIT_SEEDS["train"] + i).integers(NUM_CLASSES))
        mesh = sample_mesh(label, np.random.default_rng([SPLIT_SEEDS["train"], i]))
        seqs.append([VOCAB_SIZE + label] + mesh_to_tokens(mesh))
    seqs.sort(key=len)
    batches = []
    for b in range(POOL):
        chunk = seqs[b * OPT_BATCH : (b + 1) * OPT_BATCH]
        width = max(map(len, chunk))
        ids = torch.full((len(chunk), width), PAD)
        for row, seq in enumerate(chunk):
            ids[row, : len(seq)] = torch.tensor(seq)
        batches.append((ids, ids != PAD))
    order = np.random.default_rng(pool).permutation(POOL)
    return [batches[b] for b in order]


def train_opt(work: Path, seed: int, steps: int) -> OPTForCausalLM:
    torch.manual_seed(seed)
    model = OPTForCausalLM(mesh_opt_config(NUM_CLASSES))
    stage = Stage("opt", work, model, OPT_LR, seed, weight_decay=0.05)
    cache: dict[int, list] = {}

    def step():
        pool, index = divmod(stage.step, POOL)
        if pool not in cache:
            cache.clear()
            cache[pool] = pool_batches(pool)
        ids, mask = cache[pool][index]
        labels = ids.masked_fill(~mask, -100)
        labels[:, :2] = -100  # the prompt: class token and <bos>
        loss = model(input_ids=ids, attention_mask=mask.long(), labels=labels).loss
        stage.update(loss, max_grad_norm=1.0)
        return {"loss": loss.item()}

    if stage.step < steps:
        stage.run(steps, OPT_LR, warmup=100, step_fn=step)
    return model.eval()


def train_classifier(work: Path, seed: int, config: MeshClassifierConfig) -> MeshClassifier:
    torch.manual_seed(seed + 1)
    clf = MeshClassifier(config)

    def meshes() -> tuple[list, torch.Tensor]:
        items = [sample_mesh(i % NUM_CLASSES, np.random.default_rng([SPLIT_SEEDS["train"], 7, i])) for i in range(CLF_MESHES)]
        return items, torch.arange(CLF_MESHES) % NUM_CLASSES

    def points(batch: list, generator: torch.Generator) -> torch.Tensor:
        return torch.stack([sample_points(mesh, config.num_points, generator) for mesh in batch])

    train_classifier_stage(work, clf, seed + 1, CLF_LR, CLF_STEPS, CLF_BATCH, meshes, points)
    return clf.eval()


def export(assets: Path, model: OPTForCausalLM, clf: MeshClassifier, training: dict, temperature: float) -> None:
    """Saves a `MeshPipeline`: the OPT as a MeshXL-format folder (`model/`), the classifier
    (`classifier/`) and `model_index.json` (class names, class-token offset, provenance)."""
    from mmspec.pipelines.mesh import MeshPipeline

    pipe = MeshPipeline(model, classifier=clf, class_names=list(CLASS_NAMES), default_sampling={"temperature": temperature},
                        metadata={"training": training})
    pipe.save_pretrained(assets)


def main() -> None:
    parser = script_parser(__doc__, "outputs/train_mesh", MESH_ASSETS, threads=1)
    parser.add_argument("--opt-steps", type=int, default=OPT_STEPS, help=f"OPT training steps (default {OPT_STEPS})")
    parser.add_argument("--temperature", type=float, default=0.5, help="default sampling temperature saved with the model (default 0.5)")
    args = parser.parse_args()
    if args.opt_steps < 1:
        parser.error(f"--opt-steps must be >= 1, got {args.opt_steps}")
    work = start(args)
    started = time.perf_counter()
    model = train_opt(work, args.seed, args.opt_steps)
    clf_config = MeshClassifierConfig(num_classes=NUM_CLASSES)
    clf = train_classifier(work, args.seed, clf_config)
    training = {"script": "scripts/train_mesh_model.py", "seed": args.seed, "opt_steps": args.opt_steps,
                "dataset": "mmspec.datasets.meshes"}
    export(Path(args.assets), model, clf, training, args.temperature)
    print(f"exported to {args.assets} after {time.perf_counter() - started:.0f} s in this run")


if __name__ == "__main__":
    main()
