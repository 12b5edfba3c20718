"""Video decoding benchmark on the shipped video model: forwards per video, wall time, class
accuracy, temporal consistency and class spread (`mmspec.metrics.video`), for AR, MC-SJD
with random / above / previous-frame first drafts, and ZipAR and the frame schedule alone
and with MC-SJD.

Every method decodes the same (class, seed) list, one video per call (batch 1), in one
run with `torch.set_num_threads(1)`. Beside the table: the same measures on held-out real
videos and on their VQ reconstructions (the ceiling the tokenizer allows), a strip of
frames per class of real, AR and MC-SJD videos (`docs/video_strips_{real,ar,mc_sjd_previous_frame}.png`)
and commit-order heatmaps per frame (`docs/video_commit_heatmaps.png`).

    PYTHONPATH=. python benchmarks/video.py                 # ~20 min on one CPU thread
    PYTHONPATH=. python benchmarks/video.py --per-class 1   # a quick look
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from PIL import Image

from mmspec.assets import VIDEO_ASSETS
from mmspec.io.files import atomic_write
from mmspec.runs.bench import MethodResult, environment, report
from mmspec.datasets.moving_shapes import load_split
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.schedules import Frames
from mmspec.io.images import image_grid, label_rows, to_pil
from mmspec.metrics.video import evaluate_videos
from mmspec.pipelines.video import VideoPipeline
from mmspec.io.video import frame_heatmaps

REPO = Path(__file__).resolve().parents[1]
ZIPAR_WINDOW = 4  # tokens of the row above (rows are 8 tokens)
FRAME_ROWS = 2  # the frame schedule opens a frame once the previous has 2 committed rows


def methods(pipe: VideoPipeline, window: int) -> list[DecodingConfig]:
    mc = dict(method="mc-sjd", window=window)
    zipar = min(ZIPAR_WINDOW, pipe.frame_grid[1])
    frame_window = min(64, pipe.sequence_length)  # a whole frame of drafts per forward
    return [
        DecodingConfig("ar"),
        DecodingConfig(**mc, init="random"),
        DecodingConfig(**mc, init="above"),
        DecodingConfig(**mc, init="previous-frame"),
        DecodingConfig(method="mc-sjd", window=frame_window, init="previous-frame"),
        DecodingConfig("ar", zipar_window=zipar),
        DecodingConfig("ar", schedule=Frames(FRAME_ROWS)),
        DecodingConfig(**mc, init="previous-frame", zipar_window=zipar),
        DecodingConfig(**mc, init="previous-frame", schedule=Frames(FRAME_ROWS)),
        DecodingConfig(**mc, init="previous-frame", schedule=Frames(FRAME_ROWS, zipar_window=zipar)),
    ]


def run(pipe: VideoPipeline, items: list[tuple[int, int]], config: DecodingConfig) -> tuple[MethodResult, torch.Tensor, list]:
    videos, tokens, forwards, commits = [], [], [], []
    start = time.perf_counter()
    for label, seed in items:
        out = pipe([label], decoding=config, output_type="pt", generator=torch.Generator().manual_seed(seed))
        videos.append(out.videos * 2 - 1)
        tokens.append(out.tokens)
        forwards.append(out.stats[0].forward_passes)
        commits.append(out.stats[0].commit_iteration[0])
    wall = time.perf_counter() - start
    result = MethodResult(config.describe(), config.exact, torch.cat(videos), forwards, wall)
    return result, torch.cat(tokens), commits


def strips(pipe: VideoPipeline, videos: torch.Tensor, labels: torch.Tensor, path: Path) -> None:
    """The first video of every class, one labelled row of frames each."""
    frames, names = [], []
    for c, name in enumerate(pipe.class_names):
        i = int((labels == c).nonzero()[0, 0])
        frames += to_pil(videos[i])
        names.append(name)
    grid = label_rows(image_grid(frames, cols=videos.shape[1], scale=3), names)
    atomic_write(path, lambda tmp: grid.save(tmp, format="PNG"))


def heatmap_figure(rows: list[tuple[str, torch.Tensor]], pipe: VideoPipeline, path: Path) -> None:
    strips_ = [frame_heatmaps(commit, pipe.num_frames, pipe.frame_grid, size=64) for _, commit in rows]
    figure = Image.new("RGB", (strips_[0].width, sum(s.height + 4 for s in strips_)), "white")
    y = 0
    for strip in strips_:
        figure.paste(strip, (0, y))
        y += strip.height + 4
    figure = label_rows(figure, [name for name, _ in rows], max_width=360)
    atomic_write(path, lambda tmp: figure.save(tmp, format="PNG"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipeline", default=str(VIDEO_ASSETS))
    parser.add_argument("--per-class", type=int, default=3, help="videos per class and method (default 3)")
    parser.add_argument("--window", type=int, default=16, help="MC-SJD window (default 16)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out-dir", default=str(REPO / "benchmarks" / "results"))
    parser.add_argument("--docs", default=str(REPO / "docs"), help="where the strips and heatmaps go")
    args = parser.parse_args()
    torch.set_num_threads(1)
    Path(args.docs).mkdir(parents=True, exist_ok=True)
    pipe = VideoPipeline.from_pretrained(args.pipeline)
    pipe.set_progress_bar_config(disable=True)
    C = len(pipe.class_names)
    items = [(c, args.seed + 1000 * i + c) for i in range(args.per_class) for c in range(C)]
    labels = torch.tensor([c for c, _ in items])
    rows, F = pipe.frame_grid[0], pipe.num_frames
    results, heat_rows = [], []
    for config in methods(pipe, args.window):
        result, tokens, commits = run(pipe, items, config)
        result.quality = evaluate_videos(result.images, labels, pipe.classifier, tokens.view(len(items), F, rows, -1))
        results.append(result)
        heat_rows.append((result.method, commits[0]))
        print(f"{result.method}: {result.mean_forwards:.1f} forwards / video, {result.wall_time_s:.1f} s, {result.quality}", flush=True)
        if config.describe() in ("ar", "mc-sjd (init=previous-frame)"):
            name = "ar" if config.method == "ar" else "mc_sjd_previous_frame"
            strips(pipe, result.images, labels, Path(args.docs) / f"video_strips_{name}.png")
    real, real_labels = load_split("heldout", len(items))
    real_tokens = torch.cat([pipe.vqvae.encode(v) for v in real]).view(len(items), F, rows, -1)
    recon = pipe.decode_frames(real_tokens.flatten(1))
    strips(pipe, real, real_labels, Path(args.docs) / "video_strips_real.png")
    reference = {"real videos": evaluate_videos(real, real_labels, pipe.classifier, real_tokens),
                 "real videos through the VQ": evaluate_videos(recon, real_labels, pipe.classifier, real_tokens)}
    heatmap_figure(heat_rows, pipe, Path(args.docs) / "video_commit_heatmaps.png")
    meta = {"description": f"{args.pipeline}: {C} classes x {args.per_class} videos, batch 1, {F} frames of "
                           f"{pipe.frame_grid[0]}x{pipe.frame_grid[1]} tokens", "seed": args.seed, **environment()}
    md, _, _ = report(results, args.out_dir, "video", meta)
    lines = ["", "Reference (no decoding):", "", "| videos | class_accuracy | frame_change | token_repeat | class_spread |",
             "|---|---|---|---|---|"]
    lines += [f"| {k} | {v['class_accuracy']:.4f} | {v['frame_change']:.4f} | {v['token_repeat']:.4f} | {v.get('class_spread', float('nan')):.4f} |"
              for k, v in reference.items()]
    text = md.read_text() + "\n".join(lines) + "\n"
    atomic_write(md, lambda tmp: tmp.write_text(text))
    print(text)


if __name__ == "__main__":
    main()
