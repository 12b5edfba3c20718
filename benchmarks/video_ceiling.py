"""What limits the shipped video model's class accuracy: the judge on held-out real videos and
on their VQ reconstructions (per class), a judge trained on reconstructions instead, and AR
class accuracy per guidance scale on tuning seeds (500 + i, apart from `video.py`'s).

    PYTHONPATH=. python benchmarks/video_ceiling.py      # ~15 min on 2 CPU threads

Writes `benchmarks/results/video_ceiling.md`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from mmspec.assets import VIDEO_ASSETS
from mmspec.batch import atomic_write
from mmspec.bench import environment
from mmspec.datasets.moving_shapes import load_split
from mmspec.metrics.video import VideoClassifier
from mmspec.pipelines.video import VideoPipeline

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from train_default_model import Stage  # noqa: E402
from train_video_model import CLASSIFIER_CONFIG, augment, encode_videos  # noqa: E402


@torch.no_grad()
def through_vq(pipe: VideoPipeline, videos: torch.Tensor) -> torch.Tensor:
    return torch.cat([pipe.decode_frames(t) for t in encode_videos(pipe.vqvae, videos).split(100)])


def per_class(pred: torch.Tensor, labels: torch.Tensor, names: list[str]) -> str:
    """`accuracy (class: right/total, ...; errors as predicted names)`."""
    parts = []
    for c, name in enumerate(names):
        mine = labels == c
        wrong = pred[mine & (pred != c)]
        errors = ", ".join(f"{int((wrong == k).sum())} as {names[k]}" for k in wrong.unique().tolist())
        parts.append(f"{name} {int((pred[mine] == c).sum())}/{int(mine.sum())}" + (f" ({errors})" if errors else ""))
    return f"{float((pred == labels).float().mean()):.3f}: " + "; ".join(parts)


def judge_on_reconstructions(pipe: VideoPipeline, n: int, steps: int, work: Path) -> VideoClassifier:
    """The judge's recipe (`train_video_model.train_classifier`) on VQ reconstructions of
    training videos 20,000 onwards (none of the GPT's)."""
    videos, labels = load_split("train", n, start=20_000)
    recon = through_vq(pipe, videos)
    torch.manual_seed(0)
    clf = VideoClassifier(CLASSIFIER_CONFIG)
    stage = Stage("judge_on_reconstructions", work, clf, 2e-3, 0, weight_decay=0.01)

    def step():
        idx = torch.randint(n, (32,), generator=stage.generator)
        loss = F.cross_entropy(clf(augment(recon[idx], stage.generator)), labels[idx])
        stage.update(loss)
        return {"loss": loss.item()}

    stage.run(steps, 2e-3, warmup=20, step_fn=step)
    return clf.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heldout", type=int, default=400, help="held-out real videos (default 400)")
    parser.add_argument("--recon-train", type=int, default=3000, help="reconstructions the second judge trains on (default 3000)")
    parser.add_argument("--recon-steps", type=int, default=800)
    parser.add_argument("--per-class", type=int, default=5, help="AR videos per class and guidance scale (default 5)")
    parser.add_argument("--guidance", type=float, nargs="*", default=[1.0, 1.5, 2.0, 3.0, 4.0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out-dir", default=str(REPO / "benchmarks" / "results"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pipe = VideoPipeline.from_pretrained(VIDEO_ASSETS)
    pipe.set_progress_bar_config(disable=True)
    names = list(pipe.class_names)
    real, labels = load_split("heldout", args.heldout)
    recon = through_vq(pipe, real)
    lines = ["# video_ceiling", "", f"{VIDEO_ASSETS.relative_to(REPO)}; run: {environment()}", "",
             f"Shipped judge, {args.heldout} held-out real videos: {per_class(pipe.classifier.predict(real), labels, names)}", "",
             f"Shipped judge, the same through the VQ: {per_class(pipe.classifier.predict(recon), labels, names)}", ""]
    print("\n".join(lines), flush=True)
    work = REPO / "outputs" / "video_ceiling"  # the second judge's resumable checkpoint
    work.mkdir(parents=True, exist_ok=True)
    judge = judge_on_reconstructions(pipe, args.recon_train, args.recon_steps, work)
    lines += [f"Judge trained on {args.recon_train} reconstructions ({args.recon_steps} steps), the held-out reconstructions: "
              f"{per_class(judge.predict(recon), labels, names)}", "", "| guidance | AR class accuracy |", "|---|---|"]
    items = torch.arange(len(names)).repeat(args.per_class)
    for g in args.guidance:
        videos = torch.cat([pipe([c], decoding="ar", output_type="pt", guidance_scale=g,
                                 generator=torch.Generator().manual_seed(500 + i)).videos * 2 - 1
                            for i, c in enumerate(items.tolist())])
        lines.append(f"| {g} | {per_class(pipe.classifier.predict(videos), items, names)} |")
        print(lines[-1], flush=True)
    path = Path(args.out_dir) / "video_ceiling.md"
    atomic_write(path, lambda tmp: tmp.write_text("\n".join(lines) + "\n"))
    print(path.read_text())


if __name__ == "__main__":
    main()
