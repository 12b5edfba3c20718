"""The shipped video model's class accuracy and within-class spread per sampling setting
(guidance scale x temperature), on tuning seeds (40000 + 1000 i + class, apart from
`benchmarks/video.py`'s), beside the spread of real held-out videos.

The videos are sampled with MC-SJD and previous-frame drafts over a window of one frame:
exact, so each row is a sample of AR's distribution at that setting, in a ninth of AR's
forwards.

    PYTHONPATH=. python benchmarks/studies/video_sampling.py      # ~15 min on 1 CPU thread

Writes `benchmarks/results/video_sampling.md`.
"""

from __future__ import annotations

import argparse
import itertools
import math
from pathlib import Path

import torch
from tqdm import tqdm

from mmspec.assets import VIDEO_ASSETS
from mmspec.io.files import atomic_write
from mmspec.runs.bench import environment
from mmspec.datasets.moving_shapes import load_split
from mmspec.decoding.config import DecodingConfig
from mmspec.metrics.video import class_report, class_spread
from mmspec.pipelines.video import VideoPipeline

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", default=str(VIDEO_ASSETS))
    parser.add_argument("--per-class", type=int, default=25, help="videos per class and setting (default 25)")
    parser.add_argument("--guidance", type=float, nargs="+", default=[2.0, 3.0])
    parser.add_argument("--temperature", type=float, nargs="+", default=[1.0, 0.9, 0.8, 0.7])
    parser.add_argument("--seed", type=int, default=40000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out-dir", default=str(REPO / "benchmarks" / "results"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pipe = VideoPipeline.from_pretrained(args.pipeline)
    pipe.set_progress_bar_config(disable=True)
    names, C = list(pipe.class_names), len(pipe.class_names)
    items = [(c, args.seed + 1000 * i + c) for i in range(args.per_class) for c in range(C)]
    labels = torch.tensor([c for c, _ in items])
    decoding = DecodingConfig(method="mc-sjd", window=pipe.frame_grid[0] * pipe.frame_grid[1], init="previous-frame")
    real, real_labels = load_split("heldout", max(len(items), 2 * C))
    lines = ["# video_sampling", "", f"{args.pipeline}: {C} classes x {args.per_class} videos a row, "
             f"sampled with {decoding.describe()}; run: {environment()}", "",
             f"Real held-out videos ({len(real)}): class spread {class_spread(real, real_labels):.4f}", "",
             "| guidance | temperature | class accuracy (SE) | class spread | forwards / video | per class |",
             "|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    for g, t in itertools.product(args.guidance, args.temperature):
        videos, forwards = [], []
        for c, seed in tqdm(items, desc=f"guidance {g}, temperature {t}", leave=False):
            out = pipe([c], decoding=decoding, output_type="pt", guidance_scale=g, temperature=t,
                       generator=torch.Generator().manual_seed(seed))
            videos.append(out.videos * 2 - 1)
            forwards.append(out.stats[0].forward_passes)
        videos = torch.cat(videos)
        pred = pipe.classifier.predict(videos)
        accuracy = float((pred == labels).float().mean())
        lines.append(f"| {g} | {t} | {accuracy:.3f} ({math.sqrt(accuracy * (1 - accuracy) / len(items)):.3f}) | "
                     f"{class_spread(videos, labels):.4f} | {sum(forwards) / len(forwards):.1f} | "
                     f"{class_report(pred, labels, names).split(': ', 1)[1]} |")
        print(lines[-1], flush=True)
    path = Path(args.out_dir) / "video_sampling.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: tmp.write_text("\n".join(lines) + "\n"))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
