"""The shipped captioner: forwards per caption and wall time against AR, at batch 1 and 8,
mmspec's decodings beside transformers' own prompt-lookup and assisted decoding.

    PYTHONPATH=. python benchmarks/captioning.py                # ~10 min on 1 CPU thread
    PYTHONPATH=. python benchmarks/captioning.py --images 8     # a quick look

Every row captions the same held-out Shapes images with greedy decoding, torch on one CPU
thread, measured side by side in one run (each method warmed up on one image first).
mmspec rows go through `CaptioningPipeline` (`generate_text`); transformers rows call
`model.generate` on the same processor inputs, batch 1 only (its assisted and
prompt-lookup decoding refuse larger batches). Forwards count the prefill, for
transformers by a hook on the model (and, for assisted decoding, on the assistant
separately). "same as AR" is the share of captions token-identical to mmspec's AR;
"correct" the share whose class word, object colour and background colour match the
image (`caption_correct`). A second pass measures caption correctness on `--quality-images`
held-out images with the fastest lossless method at batch 8. Writes
`benchmarks/results/captioning.{md,json}`.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from mmspec.io.files import atomic_write
from mmspec.runs.bench import environment
from mmspec.datasets.shape_captions import caption_checks, caption_correct, load_scenes
from mmspec.io.images import to_pil
from mmspec.decoding.config import DecodingConfig
from mmspec.assets import CAPTIONER_ASSETS
from mmspec.pipelines.captioning import CaptioningPipeline

OURS = ("ar", "sjd", "mc-sjd", "lookup", "mc-sjd+lookup", "prompt-lookup")
MAX_NEW_TOKENS = 64


@dataclass
class Row:
    method: str
    batch: int
    forwards: list[float] = field(default_factory=list)  # per call (one batch)
    assistant_forwards: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # per call
    tokens: list[list[int]] = field(default_factory=list)  # per caption, up to its EOS
    texts: list[str] = field(default_factory=list)

    def summary(self, ar: "Row", scenes) -> dict:
        calls = len(self.seconds)
        captions = len(self.texts)
        forwards = sum(self.forwards) / calls
        seconds = sum(self.seconds) / captions
        ar_forwards = sum(ar.forwards) / len(ar.seconds)
        ar_seconds = sum(ar.seconds) / len(ar.texts)
        return {
            "method": self.method, "batch": self.batch,
            "forwards_per_call": round(forwards, 2),
            "assistant_forwards_per_call": round(sum(self.assistant_forwards) / calls, 2) if self.assistant_forwards else None,
            "fewer_forwards_than_ar": round(ar_forwards / forwards, 2),
            "seconds_per_caption": round(seconds, 4),
            "faster_than_ar": round(ar_seconds / seconds, 2),
            "tokens_per_caption": round(sum(map(len, self.tokens)) / captions, 1),
            "same_as_ar": sum(a == b for a, b in zip(self.tokens, ar.tokens)) / captions,
            "correct": sum(caption_correct(t, s) for t, s in zip(self.texts, scenes)) / captions,
        }


def until_eos(ids: torch.Tensor, eos: int) -> list[list[int]]:
    """New tokens `[B, N]` -> per row, the tokens up to and including the first EOS."""
    out = []
    for row in ids.tolist():
        out.append(row[: row.index(eos) + 1] if eos in row else row)
    return out


class ForwardCounter:
    """Counts calls of a module's forward (a forward hook)."""

    def __init__(self, module: torch.nn.Module):
        self.calls = 0
        module.register_forward_hook(self.hook)

    def hook(self, module, args, output):
        self.calls += 1


def run_ours(pipe, images, method: str, batch: int, window: int) -> Row:
    row = Row(method, batch)
    decoding = DecodingConfig.from_name(method, window=window)
    eos = pipe.processor.tokenizer.eos_token_id
    for start in range(0, len(images), batch):
        chunk = images[start : start + batch]
        began = time.perf_counter()
        out = pipe(chunk, decoding=decoding, max_new_tokens=MAX_NEW_TOKENS)
        row.seconds.append(time.perf_counter() - began)
        row.forwards.append(max(s.forward_passes for s in out.stats))  # the call's: until its longest caption is done
        row.tokens += until_eos(out.tokens, eos)
        row.texts += out.text
    return row


def run_transformers(pipe, images, method: str, counter: ForwardCounter, assistant=None,
                     assistant_counter: ForwardCounter | None = None, **generate_kwargs) -> Row:
    row = Row(method, 1)
    tokenizer = pipe.processor.tokenizer
    for image in images:
        inputs = pipe.encode([image], [pipe.default_prompt])
        counter.calls = 0
        if assistant_counter is not None:
            assistant_counter.calls = 0
        began = time.perf_counter()
        with torch.no_grad():
            out = pipe.model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                                      eos_token_id=tokenizer.eos_token_id, assistant_model=assistant, **generate_kwargs)
        row.seconds.append(time.perf_counter() - began)
        row.forwards.append(counter.calls)
        if assistant_counter is not None:
            row.assistant_forwards.append(assistant_counter.calls)
        new = out[:, inputs["input_ids"].shape[1]:]
        row.tokens += until_eos(new, tokenizer.eos_token_id)
        row.texts += [t.strip() for t in tokenizer.batch_decode(new, skip_special_tokens=True)]
    return row


def quality(pipe, n: int, method: str) -> dict:
    """Caption correctness (all three checks, and each alone) on `n` held-out images."""
    images, scenes = load_scenes("heldout", n)
    texts = []
    for start in range(0, n, 8):
        texts += pipe(to_pil(images[start : start + 8]), decoding=method, max_new_tokens=MAX_NEW_TOKENS).text
    checks = [caption_checks(t, s) for t, s in zip(texts, scenes)]
    return {"images": n, "method": method, "correct": sum(all(c.values()) for c in checks) / n,
            **{k: sum(c[k] for c in checks) / n for k in checks[0]}}


def markdown(summaries: list[dict], quality_row: dict, meta: dict) -> str:
    head = ("| method | batch | forwards per call | x fewer than AR | s per caption | x faster than AR | tokens per caption "
            "| same as AR | correct |")
    lines = [f"# Captioning: {meta['description']}", "", head, "|" + "---|" * 9]
    for s in summaries:
        forwards = f"{s['forwards_per_call']:.1f}"
        if s["assistant_forwards_per_call"] is not None:
            forwards += f" (+{s['assistant_forwards_per_call']:.1f} assistant)"
        lines.append(f"| {s['method']} | {s['batch']} | {forwards} | {s['fewer_forwards_than_ar']:.2f} | "
                     f"{s['seconds_per_caption']:.3f} | {s['faster_than_ar']:.2f} | {s['tokens_per_caption']:.1f} | "
                     f"{s['same_as_ar']:.0%} | {s['correct']:.0%} |")
    q = quality_row
    lines += ["", f"Caption correctness on {q['images']} held-out images ({q['method']}, greedy, batch 8): "
                  f"{q['correct']:.1%} all three right; class {q['class']:.1%}, object colour {q['object_colour']:.1%}, "
                  f"background colour {q['background_colour']:.1%}.", "",
              f"torch {meta['torch']}, transformers {meta['transformers']}, {meta['torch_threads']} thread(s), "
              f"{meta['device']}, seed-free (greedy)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default=str(CAPTIONER_ASSETS), help="saved CaptioningPipeline (default: the shipped one)")
    parser.add_argument("--images", type=int, default=24, help="held-out images per row (default 24; a multiple of 8)")
    parser.add_argument("--quality-images", type=int, default=200, help="images for the correctness pass (default 200)")
    parser.add_argument("--lookup-tokens", type=int, default=10, help="transformers' prompt_lookup_num_tokens (default 10)")
    parser.add_argument("--window", type=int, default=16, help="mmspec's draft window (default 16)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    args = parser.parse_args()
    if args.images < 8 or args.images % 8:
        parser.error(f"--images must be a positive multiple of 8, got {args.images}")
    torch.set_num_threads(args.threads)

    pipe = CaptioningPipeline.from_pretrained(args.pipeline)
    pipe.set_progress_bar_config(disable=True)
    images_t, scenes = load_scenes("heldout", args.images)
    images = to_pil(images_t)
    counter = ForwardCounter(pipe.model)
    assistant = copy.deepcopy(pipe.model)
    assistant_counter = ForwardCounter(assistant)

    jobs = [(m, 1) for m in OURS] + [(m, 8) for m in OURS] + [
        ("transformers greedy", 1), (f"transformers prompt lookup ({args.lookup_tokens})", 1),
        ("transformers assisted (same model)", 1)]
    rows = []
    for method, batch in tqdm(jobs, desc="benchmark", unit="row"):
        warm = images[:batch]
        if method in OURS:
            run_ours(pipe, warm, method, batch, args.window)
            rows.append(run_ours(pipe, images, method, batch, args.window))
            continue
        kwargs = {}
        if "lookup" in method:
            kwargs = {"prompt_lookup_num_tokens": args.lookup_tokens}
        elif "assisted" in method:
            kwargs = {"assistant": assistant, "assistant_counter": assistant_counter}
        run_transformers(pipe, warm, method, counter, **kwargs)
        rows.append(run_transformers(pipe, images, method, counter, **kwargs))

    ar = {b: next(r for r in rows if r.method == "ar" and r.batch == b) for b in (1, 8)}
    summaries = [r.summary(ar[r.batch], scenes) for r in rows]
    quality_row = quality(pipe, args.quality_images, "mc-sjd+lookup")
    meta = {
        "description": (f"the shipped captioner ({args.pipeline}), {args.images} held-out Shapes images, greedy, at most "
                        f"{MAX_NEW_TOKENS} new tokens, the pipeline's default prompt; mmspec window {args.window}"),
        **environment(),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    md = markdown(summaries, quality_row, meta)
    atomic_write(out / "captioning.md", lambda p: p.write_text(md))
    data = {"meta": meta, "rows": summaries, "quality": quality_row, "texts": {f"{r.method} b{r.batch}": r.texts[:4] for r in rows},
            "raw": [asdict(r) | {"tokens": None} for r in rows]}
    atomic_write(out / "captioning.json", lambda p: p.write_text(json.dumps(data, indent=2) + "\n"))
    print(md)


if __name__ == "__main__":
    main()
