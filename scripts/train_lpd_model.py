"""Trains the shipped LPD model on Shapes and exports it to mmspec/assets/lpd/.

Stages, each checkpointing to the work directory and resuming from there on a rerun
(the resumable `Stage` loop of `scripts/_training.py`):

1. `tokens`: Shapes training images encoded by the shipped image VQ (the raster model's
   tokens: `encode_tokens` of `train_default_model.py`);
2. `lpd`: an `LPD` decoder as LPD trains it: every image in a uniformly random order,
   every batch in a random group schedule (8 to 256 steps: LPD's tables for 20 and 32,
   `ramp_group_sizes` for the others), labels dropped to the null class for guidance; and,
   beyond LPD, a `--locality-share` of the batches in the locality-aware orders the
   pipeline decodes in. The forward runs under bfloat16 autocast (`--precision`: fast on
   CPUs with AVX-512 bf16 or AMX, much slower than float32 on CPUs without them). At the
   end it prints the loss on training and on held-out images, one cell a step in a random
   order (the joint NLL) and in the lpd-20 and lpd-32 groups;
3. `export`: an `LPDPipeline` (transformer, the shipped VQ and classifier, model_index.json).

    PYTHONPATH=. python scripts/train_lpd_model.py           # rerun to resume
    PYTHONPATH=. python scripts/train_lpd_model.py --init-from mmspec/assets/lpd --work outputs/lpd-more \
        --steps 6000 --lr 7e-4 --locality-share 0.8          # continue the shipped model
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if not __package__:  # run as `python scripts/train_lpd_model.py`: as with PYTHONPATH=., the repository root
    sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F

from mmspec.assets import DEFAULT_ASSETS, LPD_ASSETS
from mmspec.datasets.shapes import CLASS_NAMES, NUM_CLASSES, load_split
from mmspec.decoding.lpd import GUIDANCE_SCHEDULES
from mmspec.decoding.orders import GROUP_SIZES, LocalityOrder, ramp_group_sizes
from mmspec.models.networks.lpd import LPD, LPDConfig
from mmspec.pipelines import load_pipeline
from scripts._training import Stage, bf16, script_parser, start
from scripts.train_default_model import encode_tokens  # the raster model's token cache

LPD_CONFIG = LPDConfig(
    img_size=64, vqgan_stride=4,  # the shipped VQ's 16x16 tokens: the grid of LPD's 256-pixel models
    decoder_embed_dim=128, decoder_depth=6, decoder_num_heads=2,  # head dim 64, as LPD-L's
    class_num=NUM_CLASSES, vqgan_vocab_size=512, label_drop_prob=0.1,
)
TRAIN_STEP_COUNTS = (8, 12, 16, 20, 24, 32, 64, 128, 256)  # the schedules of LPD's group_sizes_256.json
LPD_IMAGES, LPD_STEPS, LPD_BATCH, LPD_LR = 60_000, 9500, 16, 1.5e-3
LOSS_IMAGES = 200
LOCALITY_STEPS = (20, 32)  # the schedules the pipeline decodes with
LOCALITY_POOL = 512  # orders computed per schedule; the grid's 8 symmetries make 4,096 of each


def grid_symmetries(g: int) -> torch.Tensor:
    """`[8, g*g]`: for each rotation or reflection of a g x g grid, where each raster cell goes."""
    cells = torch.arange(g * g).view(g, g)
    views = [torch.rot90(cells, k) for k in range(4)]
    return torch.stack([v.flatten() for v in views + [v.t() for v in views]]).argsort(dim=1)


def locality_pool(steps: int, seed: int) -> torch.Tensor:
    """`[8 * LOCALITY_POOL, cells]` locality-aware orders for `steps` steps: LOCALITY_POOL seeded
    orders (about 0.07 s each) under the grid's 8 symmetries, which map one such order to
    another (the order's rules are symmetric; only its random tie-breaks are not)."""
    order = LocalityOrder.for_steps(steps, LPD_CONFIG.grid_size)
    orders = torch.stack([order.order(seed * 1000 + i) for i in range(LOCALITY_POOL)])
    return grid_symmetries(LPD_CONFIG.grid_size)[:, orders].flatten(0, 1)


def group_schedule(steps: int) -> tuple[int, ...]:
    return GROUP_SIZES.get((LPD_CONFIG.seq_len, steps)) or ramp_group_sizes(steps, LPD_CONFIG.seq_len)


def train_lpd(work: Path, seed: int, tokens: torch.Tensor, labels: torch.Tensor, steps: int, precision: str,
              locality_share: float = 0.0, peak_lr: float = LPD_LR, init: LPD | None = None) -> LPD:
    """Each batch: one group schedule and one order per image. A `locality_share` of the
    batches take the locality-aware orders of `LOCALITY_STEPS` with their schedules (the
    orders the model decodes in); the rest, as LPD trains, uniformly random orders under a
    schedule of `TRAIN_STEP_COUNTS`. With `init`, training starts from its weights, with a
    fresh optimizer and learning-rate schedule."""
    torch.manual_seed(seed + 3)
    model = LPD(LPD_CONFIG)
    if init is not None:
        model.load_state_dict(init.state_dict())
    stage = Stage("lpd", work, model, peak_lr, seed + 3, weight_decay=0.05)
    pools = {n: locality_pool(n, seed) for n in LOCALITY_STEPS} if locality_share > 0 and stage.step < steps else {}

    def step():
        g = stage.generator
        idx = torch.randint(len(tokens), (LPD_BATCH,), generator=g)
        x, y = tokens[idx], labels[idx]
        drop = torch.rand(LPD_BATCH, generator=g) < LPD_CONFIG.label_drop_prob
        y = torch.where(drop, torch.full_like(y, LPD_CONFIG.class_num), y)
        if float(torch.rand((), generator=g)) < locality_share:
            n = LOCALITY_STEPS[int(torch.randint(len(LOCALITY_STEPS), (1,), generator=g))]
            orders = pools[n][torch.randint(len(pools[n]), (LPD_BATCH,), generator=g)]
        else:
            n = TRAIN_STEP_COUNTS[int(torch.randint(len(TRAIN_STEP_COUNTS), (1,), generator=g))]
            orders = torch.argsort(torch.rand(LPD_BATCH, LPD_CONFIG.seq_len, generator=g), dim=1)
        with bf16(precision == "bf16"):
            logits = model(x, y, orders, group_schedule(n))
        loss = F.cross_entropy(logits.float().flatten(0, 1), x.gather(1, orders).flatten())
        stage.update(loss, max_grad_norm=1.0)
        return {"loss": loss.item()}

    if stage.step < steps:
        stage.run(steps, peak_lr, warmup=200, step_fn=step)
    return model.eval()


@torch.no_grad()
def order_loss(model: LPD, tokens: torch.Tensor, labels: torch.Tensor, orders: torch.Tensor, sizes) -> float:
    """Mean cross-entropy (nats a token) of `tokens [N, T]` under their classes, decoded in
    `orders [N, T]` with the group sizes `sizes`."""
    logits = model(tokens, labels, orders, sizes)
    return float(F.cross_entropy(logits.flatten(0, 1), tokens.gather(1, orders).flatten()))


def joint_loss(model: LPD, tokens: torch.Tensor, labels: torch.Tensor, seed: int) -> float:
    """The loss of one cell a step in seeded random orders: the model's joint likelihood,
    whatever the order."""
    g = torch.Generator().manual_seed(seed)
    orders = torch.argsort(torch.rand(tokens.shape, generator=g), dim=1)
    return order_loss(model, tokens, labels, orders, group_schedule(tokens.shape[1]))


def locality_loss(model: LPD, tokens: torch.Tensor, labels: torch.Tensor, steps: int, seed: int) -> float:
    """The loss of the groups the pipeline decodes: seeded locality-aware orders of `steps` steps."""
    order = LocalityOrder.for_steps(steps, LPD_CONFIG.grid_size)
    return order_loss(model, tokens, labels, order.sample(len(tokens), torch.Generator().manual_seed(seed)), order.group_sizes)


def export(assets: Path, model: LPD, sampling: dict, guidance_schedule: str, seed: int) -> None:
    from mmspec.pipelines.lpd import LPDPipeline

    raster = load_pipeline(DEFAULT_ASSETS)
    metadata = {"training": {"script": "scripts/train_lpd_model.py", "seed": seed, "dataset": "mmspec.datasets.shapes"}}
    pipe = LPDPipeline(model, raster.vqvae, classifier=raster.classifier, class_names=list(CLASS_NAMES),
                       default_sampling=sampling, metadata=metadata, guidance_schedule=guidance_schedule)
    pipe.save_pretrained(assets)


def main() -> None:
    parser = script_parser(__doc__, "outputs/train_lpd", LPD_ASSETS, threads=2)
    parser.add_argument("--steps", type=int, default=LPD_STEPS, help=f"LPD training steps (default {LPD_STEPS})")
    parser.add_argument("--images", type=int, default=LPD_IMAGES, help=f"training images (default {LPD_IMAGES})")
    parser.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                        help="the training forward: bfloat16 autocast or float32 (default bf16)")
    parser.add_argument("--lr", type=float, default=LPD_LR, help=f"peak learning rate (default {LPD_LR})")
    parser.add_argument("--locality-share", type=float, default=0.0,
                        help="share of batches in the locality-aware orders of 20 and 32 steps (default 0: random orders only, as LPD)")
    parser.add_argument("--init-from", metavar="FOLDER",
                        help="continue training a saved LPD pipeline: its transformer is the starting point of the lpd "
                             "stage (fresh optimizer and schedule)")
    parser.add_argument("--stages", default="tokens,lpd,export", help="comma-separated stages to run, in order (default: all)")
    parser.add_argument("--guidance-scale", type=float, default=4.0, help="default CFG scale written to model_index.json (default 4.0)")
    parser.add_argument("--guidance-schedule", choices=GUIDANCE_SCHEDULES, default="constant",
                        help="default growth of guidance along the order, written to model_index.json (default constant)")
    args = parser.parse_args()
    stages = args.stages.split(",")
    unknown = set(stages) - {"tokens", "lpd", "export"}
    if unknown or args.steps < 1 or args.images < 1:
        parser.error(f"unknown stages {sorted(unknown)} or non-positive --steps/--images")
    if not 0 <= args.locality_share <= 1:
        parser.error(f"--locality-share must be in [0, 1], got {args.locality_share}")
    work = start(args)
    started = time.perf_counter()
    vq = load_pipeline(DEFAULT_ASSETS).vqvae.eval()
    tokens, labels = encode_tokens(work, vq, args.images)
    model = None
    if {"lpd", "export"} & set(stages):
        init = load_pipeline(args.init_from).transformer if args.init_from else None
        model = train_lpd(work, args.seed, tokens, labels, args.steps, args.precision, args.locality_share, args.lr, init)
    if "lpd" in stages:
        images, heldout_labels = load_split("heldout", LOSS_IMAGES)
        with torch.no_grad():
            heldout = torch.cat([vq.encode(b) for b in images.split(100)])
        for name, split in (("training", (tokens[:LOSS_IMAGES], labels[:LOSS_IMAGES])), ("held-out", (heldout, heldout_labels))):
            print(f"loss on {LOSS_IMAGES} {name} images (nats a token): one cell a step in random orders "
                  f"{joint_loss(model, *split, args.seed):.3f}, lpd-20 {locality_loss(model, *split, 20, args.seed):.3f}, "
                  f"lpd-32 {locality_loss(model, *split, 32, args.seed):.3f}")
    if "export" in stages:
        sampling = {"guidance_scale": args.guidance_scale, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
        export(Path(args.assets), model, sampling, args.guidance_schedule, args.seed)
        print(f"exported to {args.assets}")
    print(f"done after {time.perf_counter() - started:.0f} s in this run")


if __name__ == "__main__":
    main()
