"""What the training scripts share (`scripts/_training.py`): a `Stage` checkpoint restores
step, weights and generator state, the classifier step is the plain supervised step, and
every script runs as a file from the repository root, as its docs say."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from scripts import _training

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (REPO / "scripts").glob("train_*.py"))


def test_stage_checkpoint_round_trip(tmp_path):
    model = torch.nn.Linear(3, 2)
    stage = _training.Stage("probe", tmp_path, model, lr=1e-2, seed=0, weight_decay=0.0)

    def step():
        stage.update(model(torch.ones(1, 3)).sum())
        return {}

    stage.run(3, 1e-2, warmup=1, step_fn=step)
    resumed = _training.Stage("probe", tmp_path, torch.nn.Linear(3, 2), lr=1e-2, seed=0, weight_decay=0.0)
    assert resumed.step == 3 and sorted(p.name for p in tmp_path.iterdir()) == ["probe.pt"]
    assert torch.equal(resumed.model.weight, model.weight)
    assert torch.equal(resumed.generator.get_state(), stage.generator.get_state())


@pytest.mark.parametrize("autocast", [False, True])
def test_classifier_step_is_a_step_on_an_augmented_random_batch(tmp_path, autocast):
    inputs, labels = torch.randn(20, 4), torch.arange(20) % 3

    def augment(x, generator):
        return x + torch.randn(x.shape, generator=generator)

    stages = []
    for name in ("helper", "by-hand"):
        torch.manual_seed(0)
        stages.append(_training.Stage(name, tmp_path, torch.nn.Linear(4, 3), lr=1e-2, seed=1, weight_decay=0.0))
    helper, by_hand = stages
    logs = _training.classifier_step(helper, inputs, labels, 5, augment, autocast=autocast)
    idx = torch.randint(20, (5,), generator=by_hand.generator)
    x = augment(inputs[idx], by_hand.generator)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = by_hand.model(x)
    loss = F.cross_entropy(logits.float(), labels[idx])
    by_hand.update(loss)
    assert logs == {"loss": loss.item()}
    assert torch.equal(helper.model.weight, by_hand.model.weight)
    assert torch.equal(helper.generator.get_state(), by_hand.generator.get_state())


def test_classifier_step_hands_list_items_to_augment_as_the_tensor_rows_would_be(tmp_path):
    """Meshes are not rows of a tensor: a list's items go to `augment` in the order drawn."""
    rows, labels = torch.randn(10, 4), torch.arange(10) % 3
    seen = []

    def augment(batch, generator):
        seen.append(torch.stack(list(batch)))
        return seen[-1]

    for name, inputs in (("tensor", rows), ("list", list(rows))):
        torch.manual_seed(0)
        stage = _training.Stage(name, tmp_path, torch.nn.Linear(4, 3), lr=1e-2, seed=1, weight_decay=0.0)
        _training.classifier_step(stage, inputs, labels, 6, augment)
    assert torch.equal(seen[0], seen[1])


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_runs_as_a_file_from_the_repository_root(script):
    """`python scripts/train_x.py` with or without `PYTHONPATH=.`: the script finds
    `scripts._training` and mmspec in its own clone."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, f"scripts/{script}", "--help"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "--work WORK" in result.stdout and "--threads THREADS" in result.stdout
