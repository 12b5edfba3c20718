"""Trains the shipped video model on a 2-core CPU and exports it to mmspec/assets/video/.

Stages, each checkpointing to the work directory and resuming from there on a rerun
(the resumable `Stage` loop of `scripts/_training.py`):

0. `vq`: a frame VQ, the image VQ's architecture and recipe (`train_default_model.train_vq`:
   32x32 -> 8x8 codes of 4x4 pixels) trained on the frames of Moving Shapes training
   videos (`mmspec.datasets.moving_shapes`). The shipped image VQ, trained on 64x64
   images, blurs a cross's 3-pixel arms into a blob that rotates like a square.
1. `tokens`: training videos, each frame encoded by the frame VQ, saved as it goes; then
   the first frames alone of further training videos.
2. `classifier`: the video judge (`mmspec.metrics.video.VideoClassifier`) on real videos,
   with a shift, colour and noise augmentation shared by the frames of a video.
3. `gpt`: a class-conditional `VideoLlamaGen` (3-D RoPE) on the frame tokens, labels
   dropped to the null class with probability `class_dropout_prob` for guidance. Every
   step also trains on first frames alone (joint image-video training, as video models
   train on images): the first frame is where the model must draw the object, a frame is
   a prefix of a video to a causal model, and it costs an eighth of a video.

The GPT's forward runs under bfloat16 autocast (`--precision`; fast on CPUs with AVX-512
bf16 or AMX, about 15x slower than float32 on CPUs without them) and `torch.compile`
(`--no-compile`). Then `export` writes a `VideoPipeline` (transformer, vqvae, classifier,
model_index.json) to `--assets`.

    PYTHONPATH=. python scripts/train_video_model.py           # rerun to resume
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if not __package__:  # run as `python scripts/train_video_model.py`: as with PYTHONPATH=., the repository root
    sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F

from mmspec.assets import VIDEO_ASSETS
from mmspec.datasets.moving_shapes import CLASS_NAMES, FRAME_SIZE, NUM_CLASSES, NUM_FRAMES, load_split
from mmspec.metrics.video import VideoClassifier, VideoClassifierConfig
from mmspec.models.networks.video_llamagen import VideoLlamaGen, VideoLlamaGenConfig
from mmspec.pipelines.video import VideoPipeline
from mmspec.tokenizers.llamagen_vq import LlamaGenVQ
from scripts._training import SAVE_EVERY_S, Stage, bf16, cached_chunks, script_parser, start, train_classifier_stage
from scripts.train_default_model import train_vq  # the image VQ's recipe, trained here on video frames

GPT_CONFIG = VideoLlamaGenConfig(
    dim=128, n_layer=6, n_head=2, multiple_of=64,  # head dim 64: 12 rotated pairs for the frame, 10 each for row and col
    rope_base=100,  # axes of 8 positions: with LlamaGen's 10,000 most pairs would barely turn
    num_classes=NUM_CLASSES, class_dropout_prob=0.1, vocab_size=512, frames=NUM_FRAMES, block_size=NUM_FRAMES * 64,
)
CLASSIFIER_CONFIG = VideoClassifierConfig(num_classes=NUM_CLASSES, frames=NUM_FRAMES)

GPT_VIDEOS, GPT_STEPS, GPT_BATCH, GPT_LR = 16000, 8500, 8, 2e-3
FIRST_FRAMES, FRAME_BATCH = 48000, 32  # first frames of the videos after the GPT's, per step
TOKEN_CHUNK = 500  # videos rendered and encoded at a time
CLF_VIDEOS, CLF_STEPS, CLF_BATCH, CLF_LR = 8000, 1200, 32, 2e-3
VQ_VIDEOS, VQ_FIRST_VIDEO = 4000, GPT_VIDEOS + FIRST_FRAMES  # 32,000 frames
VQ_EDGE_WEIGHT = 8.0  # without it the frame VQ spent its codes on backgrounds and drew objects as blobs


def vq_frames() -> torch.Tensor:
    """Every frame `[VQ_VIDEOS * F, 3, 32, 32]` of the training videos after those the GPT
    and its first frames use."""
    return load_split("train", VQ_VIDEOS, start=VQ_FIRST_VIDEO)[0].flatten(0, 1)


@torch.no_grad()
def encode_videos(vq: LlamaGenVQ, videos: torch.Tensor) -> torch.Tensor:
    """VQ codes `[N, F * 64]`, frame after frame, of `videos [N, F, 3, 32, 32]`."""
    return torch.cat([vq.encode(f) for f in videos.flatten(0, 1).split(400)]).view(len(videos), -1)


@torch.no_grad()
def encode_tokens(path: Path, vq: LlamaGenVQ, n_videos: int, first: int = 0,
                  frames: int = NUM_FRAMES) -> tuple[torch.Tensor, torch.Tensor]:
    """VQ codes `[n_videos, frames * 64]` (frame after frame) of the first `frames` frames of
    training videos `first .. first + n_videos - 1`, and their labels, cached in `path`
    (`cached_chunks`: a rerun continues)."""
    def make(start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        videos, labels = load_split("train", count, start=first + start)
        return encode_videos(vq, videos[:, :frames]), labels

    return cached_chunks(path, n_videos, "tokens", torch.zeros(0, frames * 64, dtype=torch.long), make, TOKEN_CHUNK,
                         SAVE_EVERY_S)


def train_gpt(work: Path, seed: int, videos: tuple[torch.Tensor, torch.Tensor], first_frames: tuple[torch.Tensor, torch.Tensor],
              steps: int, precision: str, compile: bool, peak_lr: float = GPT_LR,
              init: VideoLlamaGen | None = None) -> VideoLlamaGen:
    """Each step: `GPT_BATCH` videos and `FRAME_BATCH` first frames, one loss over all their
    tokens. `videos` and `first_frames` are (tokens, labels) pairs. With `init`, training
    starts from its weights, with a fresh optimizer and learning-rate schedule."""
    torch.manual_seed(seed + 1)
    gpt = VideoLlamaGen(GPT_CONFIG)
    if init is not None:
        gpt.load_state_dict(init.state_dict())
    stage = Stage("gpt", work, gpt, peak_lr, seed + 1, weight_decay=0.05)
    forward = torch.compile(gpt) if compile else gpt

    def batch(tokens: torch.Tensor, labels: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.randint(len(tokens), (n,), generator=stage.generator)
        drop = torch.rand(n, generator=stage.generator) < GPT_CONFIG.class_dropout_prob
        return tokens[idx], torch.where(drop, GPT_CONFIG.num_classes, labels[idx])

    def step():
        total, count = 0.0, 0
        for x, y in (batch(*videos, GPT_BATCH), batch(*first_frames, FRAME_BATCH)):
            with bf16(precision == "bf16"):
                logits = forward(x, y)
            total = total + F.cross_entropy(logits.float().flatten(0, 1), x.flatten(), reduction="sum")
            count += x.numel()
        loss = total / count
        stage.update(loss, max_grad_norm=1.0)
        return {"loss": loss.item()}

    if stage.step < steps:
        stage.run(steps, peak_lr, warmup=200, step_fn=step)
    return gpt.eval()


@torch.no_grad()
def token_loss(gpt: VideoLlamaGen, tokens: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean cross-entropy (nats a token) of `tokens [N, T]` under their classes."""
    return float(F.cross_entropy(gpt(tokens, labels).flatten(0, 1), tokens.flatten()))


def augment(videos: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Class-preserving corruptions of `videos [B, F, 3, H, W]`, the same for every frame of
    a video: a shift of up to 2 pixels, per-channel colour gain and offset, pixel noise."""
    B, Fr, C, H, W = videos.shape
    padded = F.pad(videos.flatten(1, 2), (2, 2, 2, 2), mode="replicate")
    dx, dy = torch.randint(5, (2, B), generator=generator).tolist()
    x = torch.stack([padded[i, :, dy[i] : dy[i] + H, dx[i] : dx[i] + W] for i in range(B)]).view(B, Fr, C, H, W)
    gain = 1 + 0.15 * (2 * torch.rand(B, 1, C, 1, 1, generator=generator) - 1)
    offset = 0.1 * (2 * torch.rand(B, 1, C, 1, 1, generator=generator) - 1)
    sigma = torch.rand(B, 1, 1, 1, 1, generator=generator) * 0.08
    return (x * gain + offset + sigma * torch.randn(x.shape, generator=generator)).clamp(-1, 1)


def train_classifier(work: Path, seed: int) -> VideoClassifier:
    torch.manual_seed(seed + 2)
    clf = VideoClassifier(CLASSIFIER_CONFIG)
    if train_classifier_stage(work, clf, seed + 2, CLF_LR, CLF_STEPS, CLF_BATCH, lambda: load_split("train", CLF_VIDEOS), augment):
        held, held_labels = load_split("heldout", 400)
        accuracy = float((clf.predict(held) == held_labels).float().mean())
        print(f"[classifier] held-out accuracy on real videos: {accuracy:.3f}")
    return clf.eval()


def export(assets: Path, gpt: VideoLlamaGen, vq: LlamaGenVQ, clf: VideoClassifier, sampling: dict, training: dict) -> None:
    metadata = {"fps": 8, "frame_size": FRAME_SIZE,
                "training": {"script": "scripts/train_video_model.py", "dataset": "mmspec.datasets.moving_shapes", **training}}
    pipe = VideoPipeline(gpt, vq, classifier=clf, class_names=list(CLASS_NAMES), default_sampling=sampling, metadata=metadata)
    pipe.save_pretrained(assets)


def main() -> None:
    parser = script_parser(__doc__, "outputs/train_video", VIDEO_ASSETS, threads=2)
    parser.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                        help="the GPT's training forward: bfloat16 autocast or float32 (default bf16)")
    parser.add_argument("--no-compile", action="store_true", help="train the GPT eagerly, without torch.compile")
    parser.add_argument("--gpt-steps", type=int, default=GPT_STEPS, help=f"GPT training steps (default {GPT_STEPS})")
    parser.add_argument("--gpt-videos", type=int, default=GPT_VIDEOS, help=f"training videos the GPT sees (default {GPT_VIDEOS})")
    parser.add_argument("--gpt-lr", type=float, default=GPT_LR, help=f"the GPT's peak learning rate (default {GPT_LR})")
    parser.add_argument("--init-from", metavar="FOLDER",
                        help="continue training a saved video pipeline: its VQ and classifier are kept, its GPT is the "
                             "starting point of the gpt stage (fresh optimizer and schedule)")
    parser.add_argument("--stages", help="comma-separated stages to run, in order (default: all; with --init-from: "
                                          "tokens,gpt,export); e.g. 'classifier' alone")
    parser.add_argument("--guidance-scale", type=float, default=3.0,  # chosen on tuning seeds: see docs/video.md
                        help="default CFG scale written to model_index.json (default 3.0)")
    args = parser.parse_args()
    stages = (args.stages or ("tokens,gpt,export" if args.init_from else "vq,tokens,classifier,gpt,export")).split(",")
    unknown = set(stages) - {"vq", "tokens", "classifier", "gpt", "export"}
    if unknown or args.gpt_steps < 1 or args.gpt_videos < 1:
        parser.error(f"unknown stages {sorted(unknown)} or non-positive --gpt-steps/--gpt-videos")
    if args.init_from and {"vq", "classifier"} & set(stages):
        parser.error("--init-from keeps the saved frame VQ and judge: leave vq and classifier out of --stages")
    work = start(args)
    started = time.perf_counter()
    init = VideoPipeline.from_pretrained(args.init_from) if args.init_from else None
    if init is not None:
        vq, clf = init.vqvae.eval(), init.classifier
    else:
        vq = train_vq(work, args.seed, vq_frames, VQ_EDGE_WEIGHT).eval() if {"vq", "tokens", "gpt", "export"} & set(stages) else None
        clf = train_classifier(work, args.seed) if "classifier" in stages or "export" in stages else None
    gpt = None
    if {"tokens", "gpt", "export"} & set(stages):
        videos = encode_tokens(work / "tokens.pt", vq, args.gpt_videos)
        first_frames = encode_tokens(work / "first-frames.pt", vq, FIRST_FRAMES, first=args.gpt_videos, frames=1)
        if "gpt" in stages or "export" in stages:
            gpt = train_gpt(work, args.seed, videos, first_frames, args.gpt_steps, args.precision, not args.no_compile,
                            args.gpt_lr, init.transformer if init is not None else None)
            held, held_labels = load_split("heldout", 200)
            print(f"[gpt] loss (nats a token): 200 training videos {token_loss(gpt, videos[0][:200], videos[1][:200]):.3f}, "
                  f"200 held-out videos {token_loss(gpt, encode_videos(vq, held), held_labels):.3f}")
    if "export" in stages:
        sampling = {"guidance_scale": args.guidance_scale, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
        training = {"seed": args.seed, "gpt_steps": args.gpt_steps, "gpt_videos": args.gpt_videos, "gpt_lr": args.gpt_lr,
                    **({"continued_from": init.metadata.get("training")} if init is not None else {})}
        export(Path(args.assets), gpt, vq, clf, sampling, training)
        print(f"exported to {args.assets}")
    print(f"done after {time.perf_counter() - started:.0f} s in this run")


if __name__ == "__main__":
    main()
