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

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import OPTForCausalLM

from mmspec.assets import MESH_ASSETS
from mmspec.datasets.meshes import CLASS_NAMES, NUM_CLASSES, SPLIT_SEEDS, sample_mesh
from mmspec.metrics.mesh_classifier import MeshClassifier, MeshClassifierConfig, sample_points
from mmspec.models.mesh_opt import mesh_opt_config
from mmspec.tokenizers.mesh import PAD, VOCAB_SIZE, mesh_to_tokens
from scripts.train_default_model import Stage

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
    stage = Stage("classifier", work, clf, CLF_LR, seed + 1, weight_decay=0.01)
    if stage.step >= CLF_STEPS:
        return clf.eval()
    meshes = [sample_mesh(i % NUM_CLASSES, np.random.default_rng([SPLIT_SEEDS["train"], 7, i])) for i in range(CLF_MESHES)]
    labels = torch.arange(CLF_MESHES) % NUM_CLASSES

    def step():
        idx = torch.randint(CLF_MESHES, (CLF_BATCH,), generator=stage.generator).tolist()
        points = torch.stack([sample_points(meshes[i], config.num_points, stage.generator) for i in idx])
        loss = F.cross_entropy(clf(points), labels[idx])
        stage.update(loss)
        return {"loss": loss.item()}

    stage.run(CLF_STEPS, CLF_LR, warmup=20, step_fn=step)
    return clf.eval()


def export(assets: Path, model: OPTForCausalLM, clf: MeshClassifier, training: dict, temperature: float) -> None:
    """Saves a `MeshPipeline`: the OPT as a MeshXL-format folder (`model/`), the classifier
    (`classifier/`) and `model_index.json` (class names, class-token offset, provenance)."""
    from mmspec.pipelines.mesh import MeshPipeline

    pipe = MeshPipeline(model, classifier=clf, class_names=list(CLASS_NAMES), default_sampling={"temperature": temperature},
                        metadata={"training": training})
    pipe.save_pretrained(assets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="outputs/train_mesh", help="checkpoints (default outputs/train_mesh)")
    parser.add_argument("--assets", default=str(MESH_ASSETS), help="export folder (default: the packaged mmspec/assets/mesh)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--opt-steps", type=int, default=OPT_STEPS, help=f"OPT training steps (default {OPT_STEPS})")
    parser.add_argument("--temperature", type=float, default=0.5, help="default sampling temperature saved with the model (default 0.5)")
    args = parser.parse_args()
    if args.opt_steps < 1:
        parser.error(f"--opt-steps must be >= 1, got {args.opt_steps}")
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
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
