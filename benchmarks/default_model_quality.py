"""Quality of the embedded default model: one table, one command.

    PYTHONPATH=. python benchmarks/default_model_quality.py      # ~5 min on 2 CPU cores

Measures, with `--per-class` samples per class (N in all):
- AR samples at the documented default sampling settings: class accuracy (shipped
  classifier) and feature-FID against N held-out real images;
- the reference: feature-FID between two disjoint held-out real splits of N images each,
  and the classifier's accuracy on real images;
- the VQ tokenizer: PSNR of reconstructions of N held-out images (uint8, per image,
  averaged) and their feature-FID;
- mean top-1 probability and entropy per token of the distributions the sampler drew
  from, at the default settings and for the plain conditional model (no CFG, T = 1);
- the GPT's cross-entropy on the VQ tokens of N training images (the first N of the
  split, all in the GPT's training set) and of N held-out images: capacity or data?

Writes `benchmarks/results/default_model_quality.{md,json}` with versions, device and seed.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

import mmspec
from mmspec.assets import DEFAULT_ASSETS
from mmspec.pipelines.llamagen import load_default
from mmspec.datasets.shapes import NUM_CLASSES, load_split
from mmspec.decoding.generate import generate
from mmspec.core.sampling import SamplingConfig
from mmspec.io.images import to_uint8
from mmspec.metrics.classifier import classify
from mmspec.metrics.fid import frechet_distance
from mmspec.metrics.quality import evaluate_images
from mmspec.metrics.token_stats import token_cross_entropy, token_statistics


def psnr_uint8(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean per-image PSNR (dB) of two image batches in [-1, 1], after uint8 conversion."""
    x, y = to_uint8(a).astype(np.float64), to_uint8(b).astype(np.float64)
    mse = ((x - y) ** 2).reshape(len(x), -1).mean(1)
    return float(np.mean(10 * np.log10(255.0**2 / np.maximum(mse, 1e-10))))


def sample_images(model, labels: torch.Tensor, sampling: SamplingConfig, seed: int, batch: int):
    """AR samples for `labels`, in batches, each batch from its own seed; tokens, images, seconds."""
    tokens, images, seconds = [], [], 0.0
    for i, chunk in enumerate(tqdm(labels.split(batch), desc="AR samples", unit="batch")):
        t, stats = generate(model.gpt, chunk, decoding="ar", sampling=sampling, generator=torch.Generator().manual_seed(seed + i))
        tokens.append(t)
        images.append(model.vq.decode(t))
        seconds += stats.wall_time_s
    return torch.cat(tokens), torch.cat(images), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-class", type=int, default=50, help="samples per class (default 50)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=100, help="images per decoding call (default 100)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--guidance-scale", type=float, help="override the default CFG scale (exploration)")
    parser.add_argument("--temperature", type=float, help="override the default temperature (exploration)")
    parser.add_argument("--top-k", type=int, help="override the default top-k (exploration)")
    parser.add_argument("--top-p", type=float, help="override the default top-p (exploration)")
    parser.add_argument("--assets", default=str(DEFAULT_ASSETS), help="model folder (default: the shipped mmspec/assets/default)")
    parser.add_argument("--out", default="benchmarks/results/default_model_quality", help="output path without suffix")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    model = load_default(args.assets)
    requested = {"guidance_scale": args.guidance_scale, "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}
    overrides = {k: v for k, v in requested.items() if v is not None}
    sampling = replace(model.sampling, **overrides)
    n = args.per_class * NUM_CLASSES
    real_a, _ = load_split("heldout", n)
    real_b, labels_b = load_split("heldout", n, start=n)

    # the reference: two disjoint real splits of the same size, and the VQ's reconstructions
    real_scores = evaluate_images(real_b, labels_b, real_a, model.classifier)
    codes_b = torch.cat([model.vq.encode(x) for x in real_b.split(100)])
    recon = torch.cat([model.vq.decode(c) for c in codes_b.split(100)])
    recon_scores = evaluate_images(recon, labels_b, real_a, model.classifier)
    _, feats_a = classify(model.classifier, real_a)
    _, feats_b = classify(model.classifier, real_b)
    assert abs(frechet_distance(feats_b, feats_a) - real_scores["feature_fid"]) < 1e-9

    # AR samples at the default settings, the same classes and counts as the real split
    labels = torch.arange(NUM_CLASSES).repeat_interleave(args.per_class)
    tokens, images, decode_s = sample_images(model, labels, sampling, args.seed, args.batch)
    sample_scores = evaluate_images(images, labels, real_a, model.classifier)
    per_class = {name: float((model.classifier.predict(images[labels == c]) == c).double().mean())
                 for c, name in enumerate(model.class_names)}
    stats_default = token_statistics(model.gpt, labels, tokens, sampling)
    stats_plain = token_statistics(model.gpt, labels, tokens, SamplingConfig())
    train, labels_train = load_split("train", n)
    codes_train = torch.cat([model.vq.encode(x) for x in train.split(100)])
    cross_entropy = {"train": token_cross_entropy(model.gpt, labels_train, codes_train),
                     "heldout": token_cross_entropy(model.gpt, labels_b, codes_b)}

    result = {
        "samples_per_class": args.per_class,
        "samples": n,
        "seed": args.seed,
        "sampling": asdict(sampling),
        "default_sampling": not overrides,
        "ar_samples": {**sample_scores, "per_class_accuracy": per_class, "decode_wall_time_s": decode_s},
        "real_vs_real": real_scores,
        "fid_ratio_samples_over_real": sample_scores["feature_fid"] / real_scores["feature_fid"],
        "vq_reconstruction": {**recon_scores, "psnr_db": psnr_uint8(recon, real_b)},
        "token_stats_default_sampling": stats_default,
        "token_stats_plain_model": stats_plain,
        "gpt_cross_entropy_nats": cross_entropy,
        "environment": {
            "mmspec": mmspec.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(), "device": f"cpu ({platform.processor() or platform.machine()})",
            "threads": torch.get_num_threads(),
        },
        "wall_time_s": time.perf_counter() - started,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


def markdown(r: dict) -> str:
    s, real, vq = r["ar_samples"], r["real_vs_real"], r["vq_reconstruction"]
    sd, sp = r["token_stats_default_sampling"], r["token_stats_plain_model"]
    ce = r["gpt_cross_entropy_nats"]
    smp = r["sampling"]
    kind = "default" if r["default_sampling"] else "overridden"
    env = r["environment"]
    lines = [
        "# Embedded default model: quality",
        "",
        f"{r['samples']} images ({r['samples_per_class']} per class), seed {r['seed']}; sampling: guidance "
        f"{smp['guidance_scale']}, temperature {smp['temperature']}, top-k {smp['top_k']}, top-p {smp['top_p']}. "
        "Feature-FID is the FID formula on the shipped classifier's penultimate features, against "
        f"{r['samples']} held-out real images (Inception FID needs weights we cannot download).",
        "",
        "| images | class accuracy | feature-FID |",
        "|---|---|---|",
        f"| AR samples, {kind} sampling | {s['class_accuracy']:.1%} | {s['feature_fid']:.3f} |",
        f"| real, disjoint held-out split | {real['class_accuracy']:.1%} | {real['feature_fid']:.3f} |",
        f"| VQ reconstructions of that split | {vq['class_accuracy']:.1%} | {vq['feature_fid']:.3f} |",
        "",
        f"Feature-FID of samples / real-vs-real: {r['fid_ratio_samples_over_real']:.2f}. "
        f"VQ reconstruction PSNR (held-out): {vq['psnr_db']:.2f} dB.",
        "",
        "Per-class accuracy of the samples: " + ", ".join(f"{k} {v:.0%}" for k, v in s["per_class_accuracy"].items()) + ".",
        "",
        "| token distributions | mean top-1 probability | mean entropy |",
        "|---|---|---|",
        f"| {kind} sampling | {sd['mean_top1_prob']:.3f} | {sd['entropy_nats']:.2f} nats ({sd['entropy_bits']:.2f} bits) |",
        f"| plain model (no CFG, T=1) | {sp['mean_top1_prob']:.3f} | {sp['entropy_nats']:.2f} nats ({sp['entropy_bits']:.2f} bits) |",
        "",
        f"GPT cross-entropy on VQ tokens (plain model): {ce['train']:.3f} nats on {r['samples']} training images, "
        f"{ce['heldout']:.3f} on {r['samples']} held-out images.",
        "",
        f"AR decoding time for all samples: {s['decode_wall_time_s']:.0f} s. Whole run: {r['wall_time_s']:.0f} s on "
        f"{env['device']}, {env['threads']} threads; mmspec {env['mmspec']}, torch {env['torch']}, numpy {env['numpy']}, "
        f"Python {env['python']}.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
