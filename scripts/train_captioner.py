"""Trains the shipped Shapes captioner (a transformers LLaVA) on one CPU thread and exports
it to mmspec/assets/captioner/.

Resumable in three stages, each saved to the work directory and picked up when the
command is rerun:

1. `processor`: a byte-level BPE tokenizer trained on 5,000 procedural captions
   (`mmspec.datasets.shape_captions`), wrapped in a `LlavaProcessor`.
2. `tower`: the CLIP vision tower trained alone as an attribute classifier, with linear
   heads on its mean image token (class, object colour, background colour, size); the
   heads are dropped afterwards. Trained through the
   captioning loss, even with a probe beside it, the tiny ViT learnt colours in a few
   hundred steps but classes hardly at all (21 % after 1,200 steps): the language loss
   spends the steps on the template words, and a classifier step costs a tenth of a
   captioning step.
3. `captioner`: the LLaVA (that tower, frozen; projector; Llama) trained on fresh Shapes
   images, a new batch rendered each step from the run's generator, with the loss on the
   caption tokens and the end-of-sequence token.

Checkpoints (weights, optimiser, generator, step) every two minutes; held-out accuracy is
logged every `--eval-every` steps.

Then the model and processor are saved as a `CaptioningPipeline`, and the held-out
correctness of the exported model is written into its `model_index.json`.

    python scripts/train_captioner.py            # ~65 min on one thread
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

if not __package__:  # run as `python scripts/train_captioner.py`: as with PYTHONPATH=., the repository root
    sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch
from tqdm import tqdm

from mmspec.datasets.shape_captions import COLOUR_NAMES, SIZES, caption, caption_correct, load_scenes, render_scenes
from mmspec.datasets.shapes import NUM_CLASSES
from mmspec.models.networks.captioner import (IMAGE_TOKENS, PROMPT, STYLE_PROMPT, build_processor, captioner_config,
                                              default_prompt, draft_texts, train_tokenizer)
from scripts._training import Stage, script_parser, start

ASSETS = Path(__file__).resolve().parents[1] / "mmspec" / "assets" / "captioner"
TOKENIZER_CAPTIONS = 5000
STEPS, BATCH, LR, WARMUP = 1800, 32, 2e-3, 80
TOWER_STEPS, TOWER_BATCH, TOWER_LR, TOWER_WARMUP = 4000, 64, 3e-3, 100
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
            "pixel_values": quantised(torch.from_numpy(images))}


def attribute_targets(scenes) -> torch.Tensor:
    """Long `[B, 4]`: class, object colour, background colour and size of each scene."""
    return torch.tensor([[s.label, COLOUR_NAMES.index(s.object_colour), COLOUR_NAMES.index(s.background_colour),
                          SIZES.index(s.size)] for s in scenes])


class TowerClassifier(torch.nn.Module):
    """The vision tower with linear heads on its mean image token: class, object colour,
    background colour and size. (A head for the 3x3 cell on all tokens, tried beside
    them, made the loss noisy and the class slower to learn.)"""

    def __init__(self, tower):
        super().__init__()
        self.tower = tower
        self.sizes = (NUM_CLASSES, len(COLOUR_NAMES), len(COLOUR_NAMES), len(SIZES))
        self.heads = torch.nn.Linear(tower.config.hidden_size, sum(self.sizes))

    def forward(self, pixel_values: torch.Tensor) -> list[torch.Tensor]:
        """Logits of the attributes, in `attribute_targets`' order."""
        tokens = self.tower(pixel_values=pixel_values).last_hidden_state[:, 1:]  # what LLaVA takes
        return list(self.heads(tokens.mean(1)).split(self.sizes, dim=-1))

    def loss(self, pixel_values: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return sum(torch.nn.functional.cross_entropy(x, y) for x, y in zip(self(pixel_values), targets.T))

    @torch.no_grad()
    def accuracy(self, n: int = 300) -> list[float]:
        """Held-out accuracy of class, object colour and background colour."""
        images, scenes = load_scenes("heldout", n)
        targets = attribute_targets(scenes)
        logits = self(quantised(images))
        return [(x.argmax(-1) == y).float().mean().item() for x, y in zip(logits[:3], targets.T)]


def train_tower(work: Path, tower, seed: int, steps: int, eval_every: int) -> None:
    """Stage 2: the vision tower as an attribute classifier (module docstring)."""
    classifier = TowerClassifier(tower)
    stage = Stage("tower", work, classifier, TOWER_LR, seed, weight_decay=0.01)

    def step():
        rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=stage.generator)))
        images, scenes = render_scenes(rng.integers(NUM_CLASSES, size=TOWER_BATCH), rng)
        loss = classifier.loss(quantised(torch.from_numpy(images)), attribute_targets(scenes))
        stage.update(loss, max_grad_norm=1.0)
        if eval_every and (stage.step + 1) % eval_every == 0:
            classifier.eval()
            accuracy = ", ".join(f"{a:.3f}" for a in classifier.accuracy())
            classifier.train()
            tqdm.write(f"[tower] step {stage.step + 1}: loss {loss.item():.4f}, held-out class / object / background {accuracy}")
        return {"loss": loss.item()}

    if stage.step < steps:
        stage.run(steps, TOWER_LR, warmup=TOWER_WARMUP, step_fn=step)


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


def train(work: Path, seed: int, steps: int, tower_steps: int, eval_every: int):
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
    tower = model.model.vision_tower
    if not (work / "captioner.pt").exists():  # a captioner checkpoint holds the trained tower
        train_tower(work, tower, seed, tower_steps, eval_every)
    tower.requires_grad_(False)
    stage = Stage("captioner", work, model, LR, seed, weight_decay=0.01)

    def step():
        rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=stage.generator)))
        tower.eval()  # frozen: no dropout, no gradient
        loss = model(**training_batch(processor, rng, BATCH)).loss
        stage.update(loss, max_grad_norm=1.0)
        if eval_every and (stage.step + 1) % eval_every == 0 and stage.step + 1 < steps:
            model.eval()
            accuracy = caption_accuracy(model, processor, n=100)
            model.train()
            tqdm.write(f"[captioner] step {stage.step + 1}: loss {loss.item():.4f}, held-out caption accuracy {accuracy:.3f}")
        return {"loss": loss.item()}

    if stage.step < steps:
        stage.run(steps, LR, warmup=WARMUP, step_fn=step)
    return model.eval(), processor


def export(assets: Path, model, processor, seed: int, tower_steps: int, steps: int, accuracy: float) -> None:
    from mmspec.pipelines.captioning import CaptioningPipeline

    CaptioningPipeline(model, processor, default_prompt=default_prompt(), draft_texts=draft_texts()).save_pretrained(assets)
    index_path = assets / "model_index.json"
    index = json.loads(index_path.read_text())
    index["training"] = {"script": "scripts/train_captioner.py", "seed": seed, "tower_steps": tower_steps,
                         "tower_batch": TOWER_BATCH, "steps": steps, "batch": BATCH,
                         "dataset": "mmspec.datasets.shape_captions",
                         f"heldout_caption_accuracy_{EVAL_IMAGES}": round(accuracy, 4)}
    index_path.write_text(json.dumps(index, indent=2) + "\n")


def main() -> None:
    parser = script_parser(__doc__, "outputs/train_captioner", ASSETS, threads=1)
    parser.add_argument("--tower-steps", type=int, default=TOWER_STEPS, help=f"vision tower steps (default {TOWER_STEPS})")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"captioner steps (default {STEPS})")
    parser.add_argument("--eval-every", type=int, default=250, help="steps between held-out checks; 0 for none")
    args = parser.parse_args()
    if args.steps < 1 or args.tower_steps < 1 or args.eval_every < 0:
        parser.error(f"--steps and --tower-steps must be >= 1 and --eval-every >= 0, got {args.steps}, "
                     f"{args.tower_steps} and {args.eval_every}")
    work = start(args)
    started = time.perf_counter()
    model, processor = train(work, args.seed, args.steps, args.tower_steps, args.eval_every)
    accuracy = caption_accuracy(model, processor)
    print(f"held-out caption accuracy (greedy, {EVAL_IMAGES} images): {accuracy:.3f}")
    export(Path(args.assets), model, processor, args.seed, args.tower_steps, args.steps, accuracy)
    print(f"exported to {args.assets} after {time.perf_counter() - started:.0f} s in this run")


if __name__ == "__main__":
    main()
