"""What the training scripts of this folder share: the resumable `Stage` loop and its
learning-rate schedule, the resumable chunk cache (`cached_chunks`), the classifier stage,
bfloat16 autocast, and the command-line options and set-up every script starts with.

Not a script: the `train_*.py` scripts import it as `scripts._training`. Run as files
(`python scripts/train_x.py`) they first put the repository root on `sys.path`, as
`PYTHONPATH=.` does; the tests import them as the modules `scripts.train_x`.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from mmspec.io.files import atomic_write

SAVE_EVERY_S = 120  # seconds between checkpoints


def bf16(enabled: bool = True):
    """bfloat16 autocast on the CPU (a no-op when not `enabled`)."""
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled)


def lr_at(step: int, total: int, peak: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(total - warmup, 1)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


class Stage:
    """A resumable training loop: model, optimizer, data generator and step counter saved
    together to `work/<name>.pt` every `SAVE_EVERY_S` seconds and at the end."""

    def __init__(self, name: str, work: Path, model: torch.nn.Module, lr: float, seed: int, weight_decay: float):
        self.path = work / f"{name}.pt"
        self.name, self.model = name, model
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=lr, betas=(0.9, 0.95),
        )
        self.generator = torch.Generator().manual_seed(seed)
        self.step = 0
        self.extra: dict[str, torch.Tensor] = {}
        if self.path.exists():
            ckpt = torch.load(self.path, weights_only=True)
            model.load_state_dict(ckpt["model"])
            self.opt.load_state_dict(ckpt["opt"])
            self.generator.set_state(ckpt["generator"])
            self.step, self.extra = int(ckpt["step"]), ckpt["extra"]
            print(f"[{name}] resumed from {self.path} at step {self.step}")
        self._saved_at = time.monotonic()

    def save(self, force: bool = False) -> None:
        if force or time.monotonic() - self._saved_at > SAVE_EVERY_S:
            state = {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "generator": self.generator.get_state(),
                     "step": self.step, "extra": self.extra}
            atomic_write(self.path, lambda tmp: torch.save(state, tmp))
            self._saved_at = time.monotonic()

    def update(self, loss: torch.Tensor, max_grad_norm: float | None = None) -> None:
        """One optimiser step on `loss`, with the gradient norm clipped if asked."""
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_grad_norm)
        self.opt.step()

    def run(self, total: int, peak_lr: float, warmup: int, step_fn) -> None:
        """Calls `step_fn() -> dict of floats` (the loss, logged) until `total` steps."""
        self.model.train()
        with tqdm(total=total, initial=self.step, desc=self.name, unit="step") as bar:
            while self.step < total:
                for group in self.opt.param_groups:
                    group["lr"] = lr_at(self.step, total, peak_lr, warmup)
                logs = step_fn()
                self.step += 1
                bar.update(1)
                bar.set_postfix({k: f"{v:.4g}" for k, v in logs.items()})
                self.save(force=self.step == total)
        self.model.eval()


def classifier_step(stage: Stage, inputs: torch.Tensor | list, labels: torch.Tensor, batch: int,
                    augment: Callable, autocast: bool = False) -> dict[str, float]:
    """One step of the judge `stage.model` on `batch` random items of `inputs` (rows of a
    tensor, or a list of items such as meshes) with their `labels`: `augment(items, generator)`
    gives the model's input tensor (outside autocast), the forward runs under bfloat16
    autocast if `autocast`; cross-entropy, the loss logged."""
    idx = torch.randint(len(inputs), (batch,), generator=stage.generator)
    items = inputs[idx] if isinstance(inputs, torch.Tensor) else [inputs[i] for i in idx.tolist()]
    x = augment(items, stage.generator)
    with bf16(autocast):
        logits = stage.model(x)
    loss = F.cross_entropy(logits.float(), labels[idx])
    stage.update(loss)
    return {"loss": loss.item()}


def train_classifier_stage(work: Path, model: torch.nn.Module, seed: int, lr: float, steps: int, batch: int,
                           load: Callable[[], tuple[torch.Tensor | list, torch.Tensor]], augment: Callable,
                           autocast: bool = False) -> bool:
    """The `classifier` stage of a judge `model` (`classifier_step` on `load()`'s inputs and
    labels, weight decay 0.01, 20 warm-up steps), `load` called only when the stage has steps
    left. True if it trained; False if its checkpoint in `work` was already done."""
    stage = Stage("classifier", work, model, lr, seed, weight_decay=0.01)
    if stage.step >= steps:
        return False
    inputs, labels = load()
    stage.run(steps, lr, warmup=20, step_fn=lambda: classifier_step(stage, inputs, labels, batch, augment, autocast))
    return True


def cached_chunks(path: Path, n: int, key: str, empty: torch.Tensor, make, chunk: int,
                  save_every_s: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `n` rows of `key` and their labels, cached in `path`: `make(start, count)`
    gives `(rows, labels)` for items `start .. start + count - 1`, `chunk` items at a time.
    Saved at least every `save_every_s` seconds (0: after every chunk) and at the end; a
    rerun continues after the last save, or reads a prefix when fewer rows are asked for."""
    saved = torch.load(path, weights_only=True) if path.exists() else {key: empty, "labels": torch.zeros(0, dtype=torch.long)}
    rows, labels = [saved[key]], [saved["labels"]]
    saved_at = time.monotonic()
    for start in tqdm(range(len(saved["labels"]), n, chunk), desc=path.stem, unit="chunk"):
        more, more_labels = make(start, min(chunk, n - start))
        rows.append(more)
        labels.append(more_labels)
        if start + chunk >= n or time.monotonic() - saved_at >= save_every_s:
            rows, labels = [torch.cat(rows)], [torch.cat(labels)]
            atomic_write(path, lambda tmp: torch.save({key: rows[0], "labels": labels[0]}, tmp))
            saved_at = time.monotonic()
    return torch.cat(rows)[:n], torch.cat(labels)[:n]


def script_parser(doc: str, work: str, assets: Path, threads: int) -> argparse.ArgumentParser:
    """The options every script takes first: `--work` (checkpoints, default `work`),
    `--assets` (the export folder, default the packaged `assets`), `--seed` and `--threads`.
    The description is the first paragraph of the script's docstring `doc`."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--work", default=work, help=f"checkpoints (default {work})")
    parser.add_argument("--assets", default=str(assets), help=f"export folder (default: the packaged mmspec/assets/{assets.name})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=threads, help=f"torch CPU threads (default {threads})")
    return parser


def start(args: argparse.Namespace) -> Path:
    """Sets torch's CPU threads to `args.threads` and makes the work folder; returns it."""
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    return work
