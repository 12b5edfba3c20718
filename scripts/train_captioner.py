"""Trains the shipped Shapes captioner (a transformers LLaVA) on one CPU thread and exports
it to mmspec/assets/captioner/.

Resumable in two stages, each saved to the work directory and picked up when the command
is rerun:

1. `processor`: a byte-level BPE tokenizer trained on 5,000 procedural captions
   (`mmspec.datasets.shape_captions`), wrapped in a `LlavaProcessor`.
2. `captioner`: the LLaVA (CLIP vision tower, projector, Llama) trained from scratch on
   fresh Shapes images, a new batch rendered each step from the run's generator, with the
   loss on the caption tokens and the end-of-sequence token, plus a linear probe's loss
   on the projected image tokens (class, object colour, background colour, 3x3 cell):
   a tiny ViT trained through the language loss alone named colours within a few hundred
   steps but not shapes, and the probe hands the tower that signal directly (it is
   dropped at export). Checkpoints (weights, optimiser, generator, step) every two
   minutes; greedy caption correctness on held-out images is logged every `--eval-every`
   steps.

Then the model and processor are saved as a `CaptioningPipeline`, and the held-out
correctness of the exported model is written into its `model_index.json`.

    python scripts/train_captioner.py            # ~35 min on one thread
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from train_default_model import Stage  # same folder: the resumable training loop

from mmspec.datasets.shape_captions import COLOUR_NAMES, COLUMNS, ROWS, caption, caption_correct, load_scenes, render_scenes
from mmspec.datasets.shapes import NUM_CLASSES
from mmspec.models.captioner import IMAGE_TOKENS, PROMPT, STYLE_PROMPT, default_prompt, build_processor, captioner_config, train_tokenizer

ASSETS = Path(__file__).resolve().parents[1] / "mmspec" / "assets" / "captioner"
TOKENIZER_CAPTIONS = 5000
STEPS, BATCH, LR, WARMUP = 1200, 32, 2e-3, 80
PROBE_CELLS = len(ROWS) * len(COLUMNS)
STYLE_SHARE = 0.75  # training prompts that carry an example caption
EVAL_IMAGES = 200
MAX_NEW_TOKENS = 64


def quantised(images: torch.Tensor) -> torch.Tensor:
    """Float images in [-1, 1] rounded to the 8-bit grid the processor sees at inference."""
    return torch.round((images + 1) * 127.5) / 127.5 - 1


def build_or_load_processor(work: Path, seed: int):
    from transformers import LlavaProcessor

    folder = work / "processor"
    if (folder / "processor_config.json").exists():
        return LlavaProcessor.from_pretrained(folder)
    rng = np.random.default_rng(seed)
    _, scenes = render_scenes(rng.integers(NUM_CLASSES, size=TOKENIZER_CAPTIONS), rng)
    texts = [caption(s, rng) for s in scenes] + [PROMPT.replace("<image>", "")]
    processor = build_processor(train_tokenizer(texts))
    processor.save_pretrained(folder)
    return processor


def prompt_ids(processor, example: str | None = None) -> list[int]:
    """The prompt (`STYLE_PROMPT` with `example`, else `PROMPT`) with `<image>` expanded to
    the image tokens, as the processor writes it."""
    prompt = PROMPT if example is None else STYLE_PROMPT.format(example=example)
    expanded = prompt.replace("<image>", "<image>" * IMAGE_TOKENS)
    return processor.tokenizer(expanded, add_special_tokens=False).input_ids


def training_batch(processor, rng: np.random.Generator, batch: int) -> dict[str, torch.Tensor]:
    """Fresh images with one caption each: ids `[B, T]` = prompt, caption, EOS, right padding;
    labels = -100 except on caption and EOS. A quarter of the prompts are the plain `PROMPT`
    (the caption's template drawn at random); the others are `STYLE_PROMPT` with the
    caption of another random image in the same template number as the answer."""
    tokenizer = processor.tokenizer
    images, scenes = render_scenes(rng.integers(NUM_CLASSES, size=batch), rng)
    _, others = render_scenes(rng.integers(NUM_CLASSES, size=batch), rng)
    prefixes, captions = [], []
    for scene, other in zip(scenes, others):
        template = int(rng.integers(12))  # a multiple of every kind's template count
        styled = rng.random() < STYLE_SHARE
        prefixes.append(prompt_ids(processor, caption(other, template=template) if styled else None))
        captions.append(tokenizer(caption(scene, template=template), add_special_tokens=False).input_ids + [tokenizer.eos_token_id])
    T = max(len(p) + len(c) for p, c in zip(prefixes, captions))
    ids = torch.full((batch, T), tokenizer.pad_token_id)
    labels = torch.full((batch, T), -100)
    for i, (prefix, c) in enumerate(zip(prefixes, captions)):
        ids[i, : len(prefix) + len(c)] = torch.tensor(prefix + c)
        labels[i, len(prefix) : len(prefix) + len(c)] = torch.tensor(c)
    return {"input_ids": ids, "attention_mask": (ids != tokenizer.pad_token_id).long(), "labels": labels,
            "pixel_values": quantised(torch.from_numpy(images)), "probe_targets": probe_targets(scenes)}


def probe_targets(scenes) -> torch.Tensor:
    """Long `[B, 4]`: class, object colour, background colour and 3x3 cell (-100 where the
    scene has no single place: patterns and dots) of each scene."""
    def cell(position):
        if position == "everywhere":
            return -100
        row, col = position.split()
        return ROWS.index(row) * len(COLUMNS) + COLUMNS.index(col)
    return torch.tensor([[s.label, COLOUR_NAMES.index(s.object_colour), COLOUR_NAMES.index(s.background_colour), cell(s.position)]
                         for s in scenes])


class ProbedCaptioner(torch.nn.Module):
    """The captioner and a linear probe on its projected image tokens, trained together."""

    def __init__(self, captioner):
        super().__init__()
        self.captioner = captioner
        width = IMAGE_TOKENS * captioner.config.text_config.hidden_size
        self.heads = (NUM_CLASSES, len(COLOUR_NAMES), len(COLOUR_NAMES), PROBE_CELLS)
        self.probe = torch.nn.Linear(width, sum(self.heads))
        self._image_tokens = None
        captioner.model.multi_modal_projector.register_forward_hook(self._keep)

    def _keep(self, module, args, output):
        self._image_tokens = output

    def forward(self, probe_targets: torch.Tensor, **batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The caption loss and the probe's summed cross-entropies."""
        loss = self.captioner(**batch).loss
        features = self._image_tokens.reshape(len(probe_targets), -1)
        logits = self.probe(features).split(self.heads, dim=-1)
        probe = sum(torch.nn.functional.cross_entropy(x, y, ignore_index=-100) for x, y in zip(logits, probe_targets.T))
        return loss, probe


@torch.no_grad()
def caption_accuracy(model, processor, n: int = EVAL_IMAGES, batch: int = 50) -> float:
    """Greedy captions (`model.generate`, the default prompt) of the first `n` held-out
    images: the share whose class word, object colour and background colour are all right."""
    images, scenes = load_scenes("heldout", n)
    prefix = torch.tensor([prompt_ids(processor, default_prompt().split(" : ", 1)[1])])
    correct = 0
    for start in range(0, n, batch):
        pixels = quantised(images[start : start + batch])
        ids = prefix.expand(len(pixels), -1)
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pixels,
                             max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
        texts = processor.tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)
        correct += sum(caption_correct(t, s) for t, s in zip(texts, scenes[start : start + batch]))
    return correct / n


def train(work: Path, seed: int, steps: int, eval_every: int):
    from transformers import LlavaForConditionalGeneration

    processor = build_or_load_processor(work, seed)
    tokenizer = processor.tokenizer
    config = captioner_config(
        vocab_size=len(tokenizer), image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    probed = ProbedCaptioner(model)
    stage = Stage("captioner", work, probed, LR, seed, weight_decay=0.01)

    def step():
        rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=stage.generator)))
        loss, probe = probed(**training_batch(processor, rng, BATCH))
        stage.update(loss + probe, max_grad_norm=1.0)
        logs = {"loss": loss.item(), "probe": probe.item()}
        if eval_every and (stage.step + 1) % eval_every == 0 and stage.step + 1 < steps:
            model.eval()
            accuracy = caption_accuracy(model, processor, n=100)
            model.train()
            tqdm.write(f"[captioner] step {stage.step + 1}: loss {loss.item():.4f}, held-out caption accuracy {accuracy:.3f}")
        return logs

    if stage.step < steps:
        stage.run(steps, LR, warmup=WARMUP, step_fn=step)
    return model.eval(), processor


def export(assets: Path, model, processor, seed: int, steps: int, accuracy: float) -> None:
    from mmspec.pipelines.captioning import CaptioningPipeline

    CaptioningPipeline(model, processor, default_prompt=default_prompt()).save_pretrained(assets)
    index_path = assets / "model_index.json"
    index = json.loads(index_path.read_text())
    index["training"] = {"script": "scripts/train_captioner.py", "seed": seed, "steps": steps, "batch": BATCH,
                         "dataset": "mmspec.datasets.shape_captions",
                         f"heldout_caption_accuracy_{EVAL_IMAGES}": round(accuracy, 4)}
    index_path.write_text(json.dumps(index, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="outputs/train_captioner", help="checkpoints (default outputs/train_captioner)")
    parser.add_argument("--assets", default=str(ASSETS), help="export folder (default: the packaged mmspec/assets/captioner)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"training steps (default {STEPS})")
    parser.add_argument("--eval-every", type=int, default=250, help="steps between held-out checks; 0 for none")
    args = parser.parse_args()
    if args.steps < 1 or args.eval_every < 0:
        parser.error(f"--steps must be >= 1 and --eval-every >= 0, got {args.steps} and {args.eval_every}")
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    model, processor = train(work, args.seed, args.steps, args.eval_every)
    accuracy = caption_accuracy(model, processor)
    print(f"held-out caption accuracy (greedy, {EVAL_IMAGES} images): {accuracy:.3f}")
    export(Path(args.assets), model, processor, args.seed, args.steps, accuracy)
    print(f"exported to {args.assets} after {time.perf_counter() - started:.0f} s in this run")


if __name__ == "__main__":
    main()
