"""Trains the embedded default model on 2 CPU cores and exports it to mmspec/assets/default/.

One command, reproducible from a seed, in five stages that each checkpoint to the work
directory and resume from there when the command is rerun:

1. `vq`: a LlamaGen VQ tokenizer (64x64 -> 16x16 codes) on 32x32 crops of Shapes
   images (a quarter of the cost of whole images), with L1 + L2 reconstruction, codebook
   and commitment losses (no perceptual or GAN loss: their networks cannot be
   downloaded). Codes unused for `DEAD_CODE_EVERY` steps are re-initialised from random
   encoder outputs of the current batch (dead-code restart), until `RESTARTS_UNTIL`.
2. `tokens`: encodes the GPT's training images once with the trained VQ, saving as it
   goes, so a rerun continues the encoding (or extends it to more images).
3. `gpt`: a class-conditional LlamaGen GPT on those codes; labels are replaced by the
   null class with probability `class_dropout_prob`, for classifier-free guidance. Its
   forward runs through `torch.compile` unless `--no-compile` is given.
4. `vq_decoder`: more training of the VQ decoder alone on whole images, encoder and
   codebook frozen, so the codes (and the GPT trained on them) stay valid while
   reconstructions sharpen and the decoder's attention adapts to the full 16x16 grid.
5. `classifier`: the judge of `mmspec.metrics`, with blur, noise, colour and shift
   augmentation, so that it judges shapes rather than pixel fidelity.

Every forward and backward pass runs under bfloat16 autocast (faster on CPUs with
AVX-512 bf16); weights, optimiser states and the VQ's nearest-code search stay
float32.

Then `export` writes the GPT and VQ as a saved `LlamaGenPipeline` (safetensors + JSON
config per component) and the classifier beside them, to `--assets`.

    PYTHONPATH=. python scripts/train_default_model.py            # or rerun to resume
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

if not __package__:  # run as `python scripts/train_default_model.py`: as with PYTHONPATH=., the repository root
    sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from mmspec.assets import DEFAULT_ASSETS
from mmspec.datasets.shapes import CLASS_NAMES, IMAGE_SIZE, NUM_CLASSES, load_split
from mmspec.metrics.classifier import ClassifierConfig, ShapesClassifier, random_blur
from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT
from mmspec.tokenizers.llamagen_vq import LlamaGenVQ, VQConfig
from scripts._training import SAVE_EVERY_S, Stage, bf16, cached_chunks, script_parser, start, train_classifier_stage

VQ_CONFIG = VQConfig(
    codebook_size=512,
    codebook_embed_dim=8,
    encoder_ch_mult=[1, 2, 2],  # two downsamplings: 64x64 -> 16x16 = 256 tokens
    decoder_ch_mult=[1, 2, 2],
    z_channels=64,
    base_channels=32,
    num_res_blocks=1,
)
GPT_CONFIG = LlamaGenConfig(
    dim=128, n_layer=6, n_head=2, multiple_of=64,  # head dim 64, as LlamaGen's; 2 heads run faster than 4 on CPU
    num_classes=NUM_CLASSES, class_dropout_prob=0.1, vocab_size=512, block_size=256,
)
CLASSIFIER_CONFIG = ClassifierConfig(num_classes=NUM_CLASSES)

VQ_IMAGES, VQ_STEPS, VQ_BATCH, VQ_CROP, VQ_LR = 10_000, 2500, 32, 32, 1e-3
DEAD_CODE_EVERY, RESTARTS_UNTIL = 50, 2000  # dead-code restarts: every 50 steps, up to step 2000
DEC_STEPS, DEC_BATCH, DEC_LR = 600, 16, 5e-4
GPT_IMAGES, GPT_STEPS, GPT_BATCH, GPT_LR = 60_000, 8000, 32, 1.5e-3
TOKEN_CHUNK = 1000  # images rendered and encoded at a time
CLF_IMAGES, CLF_STEPS, CLF_BATCH, CLF_LR = 10_000, 800, 64, 2e-3


def random_crops(x: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    """`size` x `size` crops of `x [B, 3, H, W]`, one per image, at offsets on the token
    grid (multiples of 4 pixels), so that codes see the same pixel phase as at inference."""
    B, _, H, W = x.shape
    dy, dx = (4 * torch.randint((H - size) // 4 + 1, (2, B), generator=generator)).tolist()
    return torch.stack([x[i, :, dy[i] : dy[i] + size, dx[i] : dx[i] + size] for i in range(B)])


def edge_weights(x: torch.Tensor, edge_weight: float) -> torch.Tensor:
    """Per-pixel loss weights `[B, 1, H, W]`: 1 + `edge_weight` x the image's local contrast
    (the largest channel difference to the right or below, clamped to 1), so that a small
    object's outline counts beside the background's many smooth pixels."""
    dx = F.pad((x[..., :, 1:] - x[..., :, :-1]).abs(), (0, 1, 0, 0))
    dy = F.pad((x[..., 1:, :] - x[..., :-1, :]).abs(), (0, 0, 0, 1))
    return 1 + edge_weight * torch.maximum(dx, dy).amax(1, keepdim=True).clamp(max=1.0)


def train_vq(work: Path, seed: int, load_images: Callable[[], torch.Tensor], edge_weight: float = 0.0) -> LlamaGenVQ:
    """The VQ on random crops of `load_images()` (`[N, 3, H, W]` in [-1, 1]), called only
    when the stage has steps left; the video script trains its frame VQ with it too, with
    an `edge_weight` (`edge_weights`) on its reconstruction loss."""
    torch.manual_seed(seed)
    vq = LlamaGenVQ(VQ_CONFIG)
    stage = Stage("vq", work, vq, VQ_LR, seed, weight_decay=0.0)
    if stage.step >= VQ_STEPS:
        return vq.eval()
    images = load_images()
    V = VQ_CONFIG.codebook_size
    usage = stage.extra.setdefault("usage", torch.zeros(V))  # uses since the last restart

    def step():
        x = images[torch.randint(len(images), (VQ_BATCH,), generator=stage.generator)]
        x = random_crops(x, VQ_CROP, stage.generator)
        with bf16():
            z = F.normalize(vq.latent(x).float(), dim=1)  # l2-normalised, as LlamaGen's quantiser
        codes, z_q = vq.quantize_latent(z)
        with bf16():
            recon = vq.decode_latent(z + (z_q - z).detach()).float()  # straight-through estimator
        w = edge_weights(x, edge_weight)
        rec = (w * ((recon - x).abs() + (recon - x).pow(2))).mean() / w.mean()
        codebook_loss = (z_q - z.detach()).pow(2).mean()
        commit = VQ_CONFIG.commit_loss_beta * (z_q.detach() - z).pow(2).mean()
        loss = rec + codebook_loss + commit
        stage.update(loss)
        usage.add_(torch.bincount(codes.flatten(), minlength=V).float())
        used = int((usage > 0).sum())
        if (stage.step + 1) % DEAD_CODE_EVERY == 0 and stage.step < RESTARTS_UNTIL:
            restart_dead_codes(vq, usage, z.detach(), stage.generator)
        return {"rec": rec.item(), "commit": commit.item(), "used": used}

    stage.run(VQ_STEPS, VQ_LR, warmup=50, step_fn=step)
    return vq


@torch.no_grad()
def restart_dead_codes(vq: LlamaGenVQ, usage: torch.Tensor, z: torch.Tensor, generator: torch.Generator) -> None:
    """Moves codes unused since the last restart onto random encoder outputs `z [B, E, h, w]`
    of the current batch, then clears the usage counts."""
    dead = torch.nonzero(usage == 0)[:, 0]
    if len(dead):
        vectors = z.permute(0, 2, 3, 1).reshape(-1, z.shape[1])
        pick = torch.randint(len(vectors), (len(dead),), generator=generator)
        vq.quantize.embedding.weight[dead] = vectors[pick]
    usage.zero_()


def finetune_vq_decoder(work: Path, seed: int, vq: LlamaGenVQ) -> LlamaGenVQ:
    """Trains `post_quant_conv` and the decoder on the frozen encoder's codes."""
    for module in (vq.encoder, vq.quant_conv, vq.quantize):
        module.requires_grad_(False)
    stage = Stage("vq_decoder", work, vq, DEC_LR, seed + 3, weight_decay=0.0)
    if stage.step >= DEC_STEPS:
        return vq.eval()
    images, _ = load_split("train", VQ_IMAGES)

    def step():
        x = images[torch.randint(len(images), (DEC_BATCH,), generator=stage.generator)]
        with torch.no_grad():
            _, z_q = vq.quantize_latent(vq.latent(x))
        with bf16():
            recon = vq.decode_latent(z_q).float()
        loss = (recon - x).abs().mean() + (recon - x).pow(2).mean()
        stage.update(loss)
        return {"rec": loss.item()}

    stage.run(DEC_STEPS, DEC_LR, warmup=20, step_fn=step)
    return vq


@torch.no_grad()
def encode_tokens(work: Path, vq: LlamaGenVQ, n_images: int) -> tuple[torch.Tensor, torch.Tensor]:
    """VQ codes `[n_images, 256]` and labels of the first `n_images` training images, cached
    in `work/tokens.pt` (saved every `SAVE_EVERY_S` seconds and at the end)."""
    def make(start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels = load_split("train", count, start=start)
        return torch.cat([vq.encode(b) for b in images.split(100)]), labels

    return cached_chunks(work / "tokens.pt", n_images, "tokens", torch.zeros(0, 256, dtype=torch.long), make,
                         TOKEN_CHUNK, SAVE_EVERY_S)


def train_gpt(work: Path, seed: int, tokens: torch.Tensor, labels: torch.Tensor, steps: int, compile: bool) -> LlamaGenGPT:
    """`steps`: the length of the cosine schedule; asking a finished run for more steps
    resumes it on a new schedule (the learning rate warms up again). `compile`: run the
    training forward through `torch.compile` (about 1.3x faster steps on CPU; needs a C++
    compiler). Checkpoints hold the plain module's weights either way."""
    torch.manual_seed(seed + 1)
    gpt = LlamaGenGPT(GPT_CONFIG)
    stage = Stage("gpt", work, gpt, GPT_LR, seed + 1, weight_decay=0.05)
    forward = torch.compile(gpt) if compile else gpt
    if stage.step < steps:
        stage.run(steps, GPT_LR, warmup=100, step_fn=lambda: gpt_step(forward, stage, tokens, labels))
    return gpt.eval()


def gpt_step(gpt, stage: Stage, tokens: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    idx = torch.randint(len(tokens), (GPT_BATCH,), generator=stage.generator)
    x, y = tokens[idx], labels[idx]
    # label dropout: the null class row learns the unconditional model for CFG
    drop = torch.rand(GPT_BATCH, generator=stage.generator) < GPT_CONFIG.class_dropout_prob
    y = torch.where(drop, torch.full_like(y, GPT_CONFIG.num_classes), y)
    with bf16():
        logits = gpt(x, y)  # [B, T, V]
    loss = F.cross_entropy(logits.flatten(0, 1).float(), x.flatten())
    stage.update(loss, max_grad_norm=1.0)
    return {"loss": loss.item()}


def augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Class-preserving corruptions of `x [B, 3, H, W]`: a shift of up to 4 pixels
    (reflection-padded), per-channel colour gain and offset, blur and pixel noise."""
    B, _, H, W = x.shape
    padded = F.pad(x, (4, 4, 4, 4), mode="reflect")
    dx, dy = torch.randint(9, (2, B), generator=generator).tolist()
    x = torch.stack([padded[i, :, dy[i] : dy[i] + H, dx[i] : dx[i] + W] for i in range(B)])
    gain = 1 + 0.2 * (2 * torch.rand(B, 3, 1, 1, generator=generator) - 1)
    offset = 0.15 * (2 * torch.rand(B, 3, 1, 1, generator=generator) - 1)
    x = random_blur(x * gain + offset, 2.0, generator)
    sigma = torch.rand(B, 1, 1, 1, generator=generator) * 0.1
    return (x + sigma * torch.randn(x.shape, generator=generator)).clamp(-1, 1)


def train_classifier(work: Path, seed: int) -> ShapesClassifier:
    torch.manual_seed(seed + 2)
    clf = ShapesClassifier(CLASSIFIER_CONFIG)
    train_classifier_stage(work, clf, seed + 2, CLF_LR, CLF_STEPS, CLF_BATCH, lambda: load_split("train", CLF_IMAGES), augment,
                           autocast=True)
    return clf.eval()


def export(assets: Path, vq: LlamaGenVQ, gpt: LlamaGenGPT, clf: ShapesClassifier, sampling: dict, seed: int) -> None:
    """Saves the GPT and VQ as a `LlamaGenPipeline` (`transformer/`, `vqvae/`: safetensors +
    JSON config each, and `model_index.json`), then the classifier beside them."""
    from mmspec.pipelines.llamagen import LlamaGenPipeline

    LlamaGenPipeline(gpt, vq, class_names=list(CLASS_NAMES), default_sampling=sampling).save_pretrained(assets)
    folder = assets / "classifier"
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous() for k, v in clf.state_dict().items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(CLASSIFIER_CONFIG.to_dict(), indent=2) + "\n")
    index_path = assets / "model_index.json"
    index = json.loads(index_path.read_text())
    index.update({
        "classifier": ["mmspec.metrics.classifier", "ShapesClassifier"],
        "image_size": IMAGE_SIZE,
        "training": {"script": "scripts/train_default_model.py", "seed": seed, "dataset": "mmspec.datasets.shapes"},
    })
    index_path.write_text(json.dumps(index, indent=2) + "\n")


def main() -> None:
    parser = script_parser(__doc__, "outputs/train", DEFAULT_ASSETS, threads=2)
    parser.add_argument("--gpt-steps", type=int, default=GPT_STEPS, help=f"GPT training steps (default {GPT_STEPS})")
    parser.add_argument("--gpt-images", type=int, default=GPT_IMAGES, help=f"training images the GPT sees (default {GPT_IMAGES})")
    parser.add_argument("--no-compile", action="store_true", help="train the GPT eagerly, without torch.compile")
    parser.add_argument("--guidance-scale", type=float, default=3.0, help="default CFG scale written to model_index.json (default 3.0)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    args = parser.parse_args()
    if args.gpt_steps < 1 or args.gpt_images < 1:
        parser.error(f"--gpt-steps and --gpt-images must be >= 1, got {args.gpt_steps} and {args.gpt_images}")
    work = start(args)
    started = time.perf_counter()
    vq = train_vq(work, args.seed, lambda: load_split("train", VQ_IMAGES)[0])
    tokens, labels = encode_tokens(work, vq, args.gpt_images)
    gpt = train_gpt(work, args.seed, tokens, labels, args.gpt_steps, compile=not args.no_compile)
    vq = finetune_vq_decoder(work, args.seed, vq)
    clf = train_classifier(work, args.seed)
    sampling = {"guidance_scale": args.guidance_scale, "temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}
    export(Path(args.assets), vq, gpt, clf, sampling, args.seed)
    print(f"exported to {args.assets} after {time.perf_counter() - started:.0f} s in this run")


if __name__ == "__main__":
    main()
