"""The decoding benchmark: every method on the same conditions and seeds, side by side.

Forward passes are counted per image (a batch runs until its slowest sequence is done,
each image is charged its own count); wall time is measured in the same run for all
methods, so ratios against AR are comparable even on a noisy machine.
"""

from __future__ import annotations

import json
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from PIL import Image, ImageDraw
from tqdm import tqdm

from mmspec.core.device import device_profile
from mmspec.io.files import atomic_write
from mmspec.decoding.auto import describe_choices, merge_choices
from mmspec.decoding.config import DecodingConfig
from mmspec.metrics.quality import evaluate_images


@dataclass
class MethodResult:
    method: str
    exact: bool
    images: torch.Tensor = field(repr=False)  # [N, 3, H, W] in [-1, 1]
    forward_passes: list[int]
    wall_time_s: float
    quality: dict = field(default_factory=dict)
    choices: dict | None = None  # auto: what it chose over the run (`DecodeStats.choices`, added up)

    @property
    def mean_forwards(self) -> float:
        return sum(self.forward_passes) / len(self.forward_passes)


def run_methods(
    pipe,
    conditions: list[dict],
    methods: list[str | DecodingConfig],
    *,
    seed: int = 0,
    batch_size: int = 1,
    call_kwargs: dict | None = None,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> list[MethodResult]:
    """Runs each method (a name or a `DecodingConfig`, checked by `pipe.check_decoding`) on
    `conditions` (pipeline call kwargs for one image each, e.g. `{"class_labels": [3]}`) in
    batches of `batch_size`. The batch starting at item i is seeded with `seed + i` for every
    method, so all methods see the same conditions and seeds (with `batch_size=1`, each image
    has its own seed). Every method is checked before the first one runs."""
    results = []
    for config in [pipe.check_decoding(method) for method in methods]:
        images, forwards, choices = [], [], []
        start = time.perf_counter()
        for i in range(0, len(conditions), batch_size):
            chunk = conditions[i : i + batch_size]
            merged = {k: [v for c in chunk for v in c[k]] for k in chunk[0]}
            out = pipe(**merged, decoding=config, output_type="pt", generator=torch.Generator().manual_seed(seed + i),
                       **(call_kwargs or {}))
            images.append(out.images * 2 - 1)
            forwards += [s.forward_passes for s in out.stats]
            choices += [out.stats[0].choices] if out.stats[0].choices is not None else []
            if on_progress:
                on_progress(config.describe(), min(i + batch_size, len(conditions)), len(conditions))
        results.append(MethodResult(config.describe(), config.exact, torch.cat(images), forwards, time.perf_counter() - start,
                                    choices=merge_choices(choices) if choices else None))
    return results


def side_by_side(methods: list[DecodingConfig], samples: int, decode: Callable, *, device: str = "cpu",
                 on_output: Callable | None = None, desc: str = "samples") -> list[MethodResult]:
    """Sample i decoded by every method in turn, AR first (`decode(i, config)` returns the
    pipeline's output, `.tokens` and `.stats`): per method its forwards, seconds (the call,
    synchronised on a GPU, each sample beside its AR twin on a noisy machine) and the share
    of samples that gave AR's tokens (`quality["same_tokens_as_ar"]`). `on_output(config, out)`
    sees every output (to add up what a table needs besides)."""
    forwards = {c.describe(): [] for c in methods}
    seconds = dict.fromkeys(forwards, 0.0)
    same = dict.fromkeys(forwards, 0)
    for i in tqdm(range(samples), desc=desc):
        ar_tokens = None
        for config in methods:
            begin = time.perf_counter()
            out = decode(i, config)
            device_profile(device).synchronize()
            name = config.describe()
            seconds[name] += time.perf_counter() - begin
            forwards[name].append(out.stats[0].forward_passes)
            ar_tokens = out.tokens if ar_tokens is None else ar_tokens
            same[name] += int(torch.equal(out.tokens, ar_tokens))
            if on_output is not None:
                on_output(config, out)
    return [MethodResult(c.describe(), c.exact, torch.empty(0), forwards[c.describe()], seconds[c.describe()],
                         quality={"same_tokens_as_ar": same[c.describe()] / samples}) for c in methods]


def score_images(results: list[MethodResult], labels: torch.Tensor, real: torch.Tensor, classifier) -> None:
    """Sets each result's class accuracy and feature-FID against `real` images
    (`mmspec.metrics.quality.evaluate_images`) and prints one line per method."""
    for r in results:
        r.quality = evaluate_images(r.images, labels, real, classifier)
        print(f"{r.method}: {r.mean_forwards:.1f} forwards, {r.wall_time_s:.1f} s, accuracy {r.quality['class_accuracy']:.3f}", flush=True)


def environment(device: str | torch.device = "cpu") -> dict:
    """What a figure was measured on: the device by name (a GPU's, or the CPU's model and
    cores; not the architecture), threads and library versions."""
    import diffusers
    import transformers

    return {
        "device": device_profile(device).hardware,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "diffusers": diffusers.__version__,
    }


def git_commit(folder: str | Path = ".") -> str:
    """The short hash of the checkout at `folder` (what a result was measured on)."""
    done = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown (not a git checkout)"


def dated_environment() -> dict:
    """`environment()` with the date and the commit a result belongs to."""
    return {**environment(), "date": time.strftime("%Y-%m-%d"), "commit": git_commit()}


def write_results(out_dir: str | Path, name: str, table: str, data: dict) -> Path:
    """A benchmark's `name.md` (the markdown table) and `name.json` (its data) in `out_dir`,
    each written atomically; says where and returns the table's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / f"{name}.md", lambda tmp: tmp.write_text(table.rstrip("\n") + "\n"))
    atomic_write(out / f"{name}.json", lambda tmp: tmp.write_text(json.dumps(data, indent=1, default=str)))
    print(f"wrote {out / name}.md")
    return out / f"{name}.md"


def report_paths(out_dir: str | Path, name: str) -> tuple[Path, Path, Path]:
    """The table, the data and the plot that `report` writes: `name.md`, `.json`, `.png`."""
    out_dir = Path(out_dir)
    return out_dir / f"{name}.md", out_dir / f"{name}.json", out_dir / f"{name}.png"


def report(results: list[MethodResult], out_dir: str | Path, name: str, meta: dict,
           sample: str = "image") -> tuple[Path, Path, Path]:
    """Writes `name.md`, `name.json` and the speed-up plot `name.png` (each atomically); AR
    (the row named "ar", which `results` must hold) is the baseline of the ratios; `sample`
    names what one output is in the table's headers."""
    base = next((r for r in results if r.method == "ar"), None)
    if base is None:
        raise ValueError(f"the ratios of {name} are against AR: its methods ({', '.join(r.method for r in results)}) need ar")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    quality_keys = sorted({k for r in results for k in r.quality})
    rows = []
    for r in results:
        rows.append({
            "method": r.method,
            "exact": r.exact,
            "forwards_per_image": round(r.mean_forwards, 1),
            "fewer_forwards_vs_ar": round(base.mean_forwards / r.mean_forwards, 2),
            "wall_time_s": round(r.wall_time_s, 2),
            "faster_vs_ar": round(base.wall_time_s / r.wall_time_s, 2),
            **{k: round(r.quality[k], 4) for k in quality_keys if k in r.quality},
        })
    headers = ["method", "exact", f"forwards / {sample}", "x fewer forwards", "wall time (s)", "x faster", *quality_keys]
    lines = [f"# {name}", "", f"{meta.get('description', '')}", "",
             "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        values = list(row.values())
        values[1] = "yes" if values[1] else "no"
        lines.append("| " + " | ".join(str(v) for v in values) + " |")
    chose = [f"- {r.method} chose: {describe_choices(r.choices)}" for r in results if r.choices]
    lines += [""] + chose if chose else []
    lines += ["", "Run: " + ", ".join(f"{k}={v}" for k, v in meta.items() if k != "description")]
    md, js, png = report_paths(out_dir, name)
    atomic_write(md, lambda p: p.write_text("\n".join(lines) + "\n"))
    atomic_write(js, lambda p: p.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n"))
    atomic_write(png, lambda p: speedup_plot(rows).save(p, format="PNG"))
    return md, js, png


def speedup_plot(rows: list[dict], width: int = 900, bar_h: int = 22) -> Image.Image:
    """Horizontal bars: forward-pass and wall-time speed-up over AR per method."""
    pad = 12
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    label_w = max(290, max(int(measure.textlength(r["method"])) for r in rows) + pad)  # long names widen the picture
    width += label_w - 290
    height = pad * 3 + 20 + len(rows) * (2 * bar_h + 8)
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    top = max(max(r["fewer_forwards_vs_ar"], r["faster_vs_ar"]) for r in rows)
    scale = (width - label_w - 3 * pad - 40) / max(top, 1.0)
    x = pad
    for text, colour in (("speed-up over AR:", None), ("forward passes", (59, 82, 139)), ("wall time", (94, 201, 98))):
        if colour:
            draw.rectangle([x, pad + 1, x + 10, pad + 11], fill=colour)
            x += 14
        draw.text((x, pad), text, fill="black")
        x += int(draw.textlength(text)) + 16
    y = pad * 2 + 20
    x0 = label_w + pad
    for r in rows:
        draw.text((pad, y + bar_h // 2 + 4), r["method"], fill="black")
        for value, colour, dy in ((r["fewer_forwards_vs_ar"], (59, 82, 139), 0), (r["faster_vs_ar"], (94, 201, 98), bar_h)):
            draw.rectangle([x0, y + dy, x0 + max(int(value * scale), 1), y + dy + bar_h - 4], fill=colour)
            draw.text((x0 + int(value * scale) + 6, y + dy + 6), f"{value:.2f}x", fill="black")
        y += 2 * bar_h + 8
    one = x0 + int(scale)
    draw.line([one, pad * 2 + 16, one, height - pad], fill=(200, 0, 0))
    return img
