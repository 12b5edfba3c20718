"""What limits the shipped video model's class accuracy: the judge on held-out real videos and
on their reconstructions by the shipped frame VQ and by the image VQ (per class, with PSNR),
and a picture of both reconstructions. The sampling settings are chosen by `video_sampling.py`.

    PYTHONPATH=. python benchmarks/studies/video_ceiling.py      # ~3 min on 2 CPU threads

Writes `benchmarks/results/video_ceiling.md` and `docs/video_vq.png`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from mmspec.assets import VIDEO_ASSETS

from mmspec.pipelines.llamagen import load_default
from mmspec.io.files import atomic_write
from mmspec.runs.bench import environment
from mmspec.datasets.moving_shapes import load_split
from mmspec.io.images import image_grid, label_rows, to_pil
from mmspec.metrics.video import class_report
from mmspec.pipelines.video import VideoPipeline
from mmspec.tokenizers.llamagen_vq import LlamaGenVQ

REPO = Path(__file__).resolve().parents[2]
PICTURE_CLASSES = ("cross rotate", "cross rotate", "square rotate", "cross up")


@torch.no_grad()
def through_vq(vq: LlamaGenVQ, videos: torch.Tensor) -> torch.Tensor:
    """`videos [N, F, 3, H, W]` (square frames) encoded and decoded frame by frame."""
    return torch.cat([vq.decode(vq.encode(f)) for f in videos.flatten(0, 1).split(400)]).view(videos.shape)


def psnr(recon: torch.Tensor, real: torch.Tensor) -> float:
    """dB, for images in [-1, 1]."""
    return float(10 * torch.log10(4 / (recon - real).pow(2).mean()))


def save_picture(path: Path, real: torch.Tensor, labels: torch.Tensor, names: list[str],
                 recons: dict[str, torch.Tensor]) -> None:
    """Frames 0, 2, 4, 6 of a held-out video of each of `PICTURE_CLASSES`: real, then each
    reconstruction, one labelled row each."""
    frames, rows = [], []
    for i, name in enumerate(PICTURE_CLASSES):
        index = int(torch.nonzero(labels == names.index(name))[PICTURE_CLASSES[:i].count(name), 0])
        for what, videos in {"real": real, **recons}.items():
            frames += to_pil(videos[index, ::2])
            rows.append(f"{name}: {what}")
    grid = label_rows(image_grid(frames, cols=len(frames) // len(rows), scale=3), rows)
    atomic_write(path, lambda tmp: grid.save(tmp, format="PNG"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heldout", type=int, default=400, help="held-out real videos (default 400)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out-dir", default=str(REPO / "benchmarks" / "results"))
    parser.add_argument("--picture", default=str(REPO / "docs" / "video_vq.png"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pipe = VideoPipeline.from_pretrained(VIDEO_ASSETS)
    pipe.set_progress_bar_config(disable=True)
    names = list(pipe.class_names)
    real, labels = load_split("heldout", args.heldout)
    frame_vq, image_vq = through_vq(pipe.vqvae, real), through_vq(load_default().vq, real)
    lines = ["# video_ceiling", "", f"{VIDEO_ASSETS.relative_to(REPO)}; run: {environment()}", "",
             f"Shipped judge, {args.heldout} held-out real videos: {class_report(pipe.classifier.predict(real), labels, names)}", ""]
    for what, recon in (("the shipped frame VQ", frame_vq), ("the image VQ (mmspec/assets/default)", image_vq)):
        lines += [f"Shipped judge, the same through {what} (PSNR {psnr(recon, real):.1f} dB): "
                  f"{class_report(pipe.classifier.predict(recon), labels, names)}", ""]
    save_picture(Path(args.picture), real, labels, names, {"frame VQ": frame_vq, "image VQ": image_vq})
    path = Path(args.out_dir) / "video_ceiling.md"
    atomic_write(path, lambda tmp: tmp.write_text("\n".join(lines) + "\n"))
    print(path.read_text())


if __name__ == "__main__":
    main()
