"""The `mmspec` command line. A user error prints one line and exits with status 2."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch

log = logging.getLogger("mmspec")


class UserError(Exception):
    """A mistake in the command line or its inputs: reported in one line, exit status 2."""


def random_llamagen(seed: int = 0):
    """A small LlamaGen c2i GPT and VQ with random weights (the stand-in until a trained
    model ships in assets/): its images are noise, its timings are real."""
    from mmspec.models.llamagen import LlamaGenConfig, LlamaGenGPT
    from mmspec.tokenizers.llamagen_vq import LlamaGenVQ, VQConfig

    torch.manual_seed(seed)
    gpt = LlamaGenGPT(LlamaGenConfig(dim=128, n_layer=4, n_head=4, vocab_size=512, block_size=256, num_classes=10)).eval()
    vq = LlamaGenVQ(VQConfig(codebook_size=512, encoder_ch_mult=[1, 1, 2], decoder_ch_mult=[1, 1, 2], z_channels=64, base_channels=32)).eval()
    return gpt, vq


def cmd_generate(args) -> None:
    from tqdm import tqdm

    from mmspec.decoding.generate import generate
    from mmspec.decoding.sampling import SamplingConfig
    from mmspec.images import image_grid, to_pil

    torch.set_num_threads(args.threads) if args.threads else None
    gpt, vq = random_llamagen()
    print("note: no trained model ships in assets/ yet; generating from a small random LlamaGen (images are noise)")
    n_classes = gpt.config.num_classes
    classes = args.classes or list(range(n_classes))
    if any(c < 0 or c >= n_classes for c in classes):
        raise UserError(f"--classes must lie in [0, {n_classes}), got {classes}")
    labels = torch.tensor([c for c in classes for _ in range(args.per_class)])
    sampling = SamplingConfig(guidance_scale=args.guidance_scale, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    T = gpt.config.block_size
    with tqdm(total=T, desc=f"decoding {len(labels)} images ({args.decoding})", unit="tok") as bar:
        tokens, stats = generate(
            gpt, labels, decoding=args.decoding, sampling=sampling,
            generator=torch.Generator().manual_seed(args.seed),
            on_step=lambda done, total: bar.update(done - bar.n),
        )
    images = to_pil(vq.decode(tokens))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.png")
    image_grid(images, cols=args.per_class, scale=2).save(tmp)
    tmp.replace(out)
    print(f"wrote {out} ({len(classes)} rows x {args.per_class} images)")
    print(f"forward passes: {stats.forward_passes}, tokens per forward: {stats.tokens_per_forward:.2f}, wall time: {stats.wall_time_s:.1f} s")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mmspec", description="Parallel decoding for autoregressive generators.")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="generate a grid of images, one row per class")
    g.add_argument("--classes", type=int, nargs="*", help="class labels, one row each (default: all)")
    g.add_argument("--per-class", type=int, default=4, help="images per class (default 4)")
    g.add_argument("--decoding", default="ar", help="decoding method (default ar)")
    g.add_argument("--guidance-scale", type=float, default=2.0, help="classifier-free guidance scale (default 2.0)")
    g.add_argument("--temperature", type=float, default=1.0, help="sampling temperature, 0 = greedy (default 1.0)")
    g.add_argument("--top-k", type=int, default=0, help="top-k filter, 0 = off (default 0)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus filter in (0, 1] (default 1.0)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    g.add_argument("--out", default="outputs/grid.png", help="output PNG (default outputs/grid.png)")
    g.set_defaults(run=cmd_generate)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except (UserError, ValueError) as err:
        print(f"mmspec {args.command}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
