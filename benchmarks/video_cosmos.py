"""Decoding methods on a Cosmos-Predict1-format video pipeline: forwards per video and wall
time, each continuation timed beside its AR twin.

    PYTHONPATH=. python benchmarks/video_cosmos.py                        # the tiny config, trained here first
    PYTHONPATH=. python benchmarks/video_cosmos.py --input-frames 9       # two conditioning latent frames
    PYTHONPATH=. python benchmarks/video_cosmos.py --pipeline DIR --videos a.mp4 b.mp4 --input-frames 9 \\
        --device cuda --threads 0 --name cosmos-4b                        # a real checkpoint saved as a pipeline

The tiny config is the 4B model's architecture scaled down (3 layers of 96, QK norm, 3-D
rope) over the Cosmos tokenizer fixture (the original's DV8x16x16 code on tiny random
weights, FSQ levels 4,4,4,3,3,3: 1,728 codes). So that drafts meet learned structure, not
noise, the script first trains it (seeded, `--train-steps`, a few minutes on a CPU) on
Moving Shapes videos (`mmspec.datasets.moving_shapes`) scaled to 17 frames of 128 x 128,
tokenized by that tokenizer: 3 latent frames of 8 x 8. Each held-out video's first frame
(or nine) conditions every method in turn, AR first, one video per call (batch 1).

Reports per method: forward passes per video, how many times fewer than AR, wall time
(decoding and the tokenizer's decode) and its ratio to AR, and the share of videos whose
tokens equal AR's (1.0 for auto and keyed under the same seed). Writes
`benchmarks/results/video_cosmos_{name}.{md,json,png}`.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

from mmspec.datasets.moving_shapes import load_split
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.schedules import Frames
from mmspec.models.networks.cosmos import CosmosAR, CosmosARConfig
from mmspec.pipelines.cosmos import CosmosPipeline
from mmspec.runs.bench import dated_environment, report, side_by_side
from mmspec.tokenizers.cosmos_video import CosmosVideoTokenizer
from tests.helpers.cosmos import TOKENIZER

METHODS = ["ar", "auto", "keyed+previous-frame", "mc-sjd", "mc-sjd+previous-frame", "sjd"]


def cosmos_clips(split: str, n: int, start: int = 0) -> torch.Tensor:
    """Moving Shapes videos as Cosmos inputs: float `[n, 17, 3, 128, 128]` in [0, 1] (each of
    the 8 frames shown twice, the last three times; every pixel 4 x 4)."""
    videos, _ = load_split(split, n, start)
    videos = torch.cat([videos.repeat_interleave(2, 1), videos[:, -1:]], 1)
    return F.interpolate(videos.flatten(0, 1), scale_factor=4, mode="nearest").view(n, 17, 3, 128, 128).add(1).div(2)


@torch.no_grad()
def tokenize(tokenizer: CosmosVideoTokenizer, n: int, chunk: int = 32) -> torch.Tensor:
    """Long `[n, 3 * 8 * 8]`: the latent tokens of the first `n` training videos."""
    out = []
    for start in tqdm(range(0, n, chunk), desc="tokenizing"):
        clips = cosmos_clips("train", min(chunk, n - start), start)
        out.append(tokenizer.encode(clips.movedim(1, 2) * 2 - 1).flatten(1))
    return torch.cat(out)


def train_tiny(tokenizer: CosmosVideoTokenizer, steps: int, videos: int, seed: int) -> CosmosAR:
    """The tiny config trained by next-token cross-entropy on `videos` tokenized clips."""
    tokens = tokenize(tokenizer, videos)
    torch.manual_seed(seed)
    config = CosmosARConfig(dim=96, n_layers=3, n_heads=4, n_kv_heads=2, ffn_hidden_size=256,
                            vocab_size=tokenizer.codebook_size, latent_shape=[3, 8, 8], max_batch_size=4)
    model = CosmosAR(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, 3e-3, total_steps=steps, pct_start=0.1)
    g = torch.Generator().manual_seed(seed)
    for _ in (bar := tqdm(range(steps), desc="training")):
        batch = tokens[torch.randint(len(tokens), (32,), generator=g)]
        loss = F.cross_entropy(model(batch)[:, :-1].flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pipeline", help="a saved CosmosPipeline folder instead of the tiny config")
    parser.add_argument("--videos", nargs="*", help="conditioning video files for --pipeline (read with mmspec.io.video)")
    parser.add_argument("--name", default="tiny", help="the results' name (default tiny)")
    parser.add_argument("--input-frames", type=int, default=1, help="conditioning frames, 1 or 9 (default 1)")
    parser.add_argument("--count", type=int, default=8, help="held-out videos of the tiny config (default 8)")
    parser.add_argument("--train-steps", type=int, default=600, help="training steps of the tiny config (default 600)")
    parser.add_argument("--train-videos", type=int, default=1024, help="training videos of the tiny config (default 1024)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out-dir", default="benchmarks/results")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.pipeline:
        from mmspec.io.video import read_video
        from mmspec.pipelines import load_pipeline

        pipe = load_pipeline(args.pipeline)
        inputs = [torch.from_numpy(read_video(path, args.input_frames)).movedim(-1, 1).float() / 255 for path in args.videos]
        trained = "a saved pipeline"
    else:
        tokenizer = CosmosVideoTokenizer.from_pretrained(TOKENIZER)
        start = time.perf_counter()
        pipe = CosmosPipeline(train_tiny(tokenizer, args.train_steps, args.train_videos, seed=0), tokenizer)
        trained = f"trained {args.train_steps} steps on {args.train_videos} videos in {time.perf_counter() - start:.0f} s"
        inputs = list(cosmos_clips("heldout", args.count)[:, :args.input_frames])
    pipe = pipe.to(args.device)
    pipe.set_progress_bar_config(disable=True)
    rows = pipe.frame_grid[0]
    methods = [DecodingConfig.from_name(name) for name in METHODS]
    methods.append(dataclasses.replace(DecodingConfig.from_name("mc-sjd", init="previous-frame"), schedule=Frames(rows // 2)))
    for config in methods:
        pipe.check_decoding(config)
    call = dict(num_input_frames=args.input_frames, output_type="pt")
    pipe(inputs[0], decoding="ar", **call)  # warm-up: first calls allocate and measure auto's cost curve
    pipe(inputs[0], decoding="auto", **call)
    results = side_by_side(methods, len(inputs), device=args.device, desc="videos", decode=lambda i, config: pipe(
        inputs[i], decoding=config, generator=torch.Generator().manual_seed(i), **call))
    frames, h, w = pipe.latent_shape
    meta = {
        "description": f"CosmosPipeline ({args.name}: {trained}), latent {frames} x {h} x {w} ({pipe.num_frames} frames of "
                       f"{pipe.frame_size[0]} x {pipe.frame_size[1]}), {args.input_frames} conditioning frame(s), "
                       f"{len(inputs)} videos, batch 1, sampling {pipe.default_sampling}; each video continued by every "
                       f"method in turn, AR first. Wall time covers decoding and the tokenizer's decode, torch on "
                       f"{torch.get_num_threads()} thread(s), device {args.device}.",
        **dated_environment(),
    }
    for path in report(results, args.out_dir, f"video_cosmos_{args.name}-{args.input_frames}f", meta, sample="video"):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
