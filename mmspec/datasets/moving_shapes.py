"""Moving Shapes: a procedural, class-labelled video dataset, generated deterministically from a seed.

Eight classes of (shape, motion) (`CLASS_NAMES`): a flat-coloured circle, square,
triangle or cross that translates, grows, rotates or changes colour over `NUM_FRAMES`
frames of 32x32 RGB, in front of a static background (a gentle two-colour gradient with
frozen faint noise). The shipped video model's frame VQ turns each frame into 8x8 tokens.
Every shape appears with two motions and every motion but one with two shapes, so a
classifier (and the generator) must get both the shape and the motion right.

The background never moves: most tokens of a frame repeat those of the frame before,
which is what previous-frame drafts exploit, and what a video model is expected to learn.
Colours come from the Shapes palette (`mmspec.datasets.shapes.PALETTE`), the object's
contrasting with the background.

Videos are float32 `[N, F, 3, 32, 32]` in [-1, 1]; labels are long `[N]`, balanced
(`label = index % 8`). Splits are seed ranges as in `mmspec.datasets.shapes`.

Example:
    >>> from mmspec.datasets.moving_shapes import load_split
    >>> videos, labels = load_split("heldout", 10)
    >>> videos.shape, labels.tolist()
    (torch.Size([10, 8, 3, 32, 32]), [0, 1, 2, 3, 4, 5, 6, 7, 0, 1])
"""

from __future__ import annotations

import numpy as np
import torch

from mmspec.datasets.shapes import PALETTE, _contrasting, _random_colours

# (shape, motion) per class
CLASSES = (
    ("circle", "right"), ("circle", "grow"), ("square", "down"), ("square", "rotate"),
    ("triangle", "left"), ("triangle", "colour"), ("cross", "up"), ("cross", "rotate"),
)
CLASS_NAMES = tuple(f"{shape} {motion}" for shape, motion in CLASSES)
NUM_CLASSES = len(CLASSES)
NUM_FRAMES = 8
FRAME_SIZE = 32
CHUNK = 1000  # videos per seed
SPLIT_SEEDS = {"train": 0, "heldout": 1_000_000}
# Crosses are drawn 1.3x larger, arms 4.5 to 6.4 pixels wide: at 4x4 pixels a token, thinner
# arms come back from the VQ as a blob that rotates like a square.
CROSS_SCALE = 1.3

_xy = np.arange(FRAME_SIZE, dtype=np.float32) + 0.5  # pixel centres
Y = _xy[None, None, :, None]  # [1, 1, H, 1]
X = _xy[None, None, None, :]  # [1, 1, 1, W]
STEPS = np.arange(NUM_FRAMES, dtype=np.float32)[None, :, None, None]  # [1, F, 1, 1]: frame index


def _col(v: np.ndarray) -> np.ndarray:
    """Per-video parameters `[n]` -> `[n, 1, 1, 1]`, to broadcast against `[n, F, H, W]`."""
    return v.astype(np.float32)[:, None, None, None]


def _background(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Static backgrounds `[n, 3, H, W]` in [0, 1] and their mean colours `[n, 3]`."""
    c1, c2 = _random_colours(rng, n), _random_colours(rng, n)
    c2 = c1 + 0.25 * (c2 - c1)  # gentle, so the object stays the main content
    a = rng.uniform(0, 2 * np.pi, n).astype(np.float32)[:, None, None]
    xy = _xy - FRAME_SIZE / 2
    t = (xy[None, None, :] * np.cos(a) + xy[None, :, None] * np.sin(a)) / FRAME_SIZE + 0.5  # [n, H, W]
    img = c1[:, :, None, None] + (c2 - c1)[:, :, None, None] * t[:, None]
    noise = 0.01 * rng.standard_normal(img.shape, dtype=np.float32)  # frozen: the same in every frame
    return img + noise, (c1 + c2) / 2


def _trajectory(rng, n: int, motion: str, reach: float) -> tuple[np.ndarray, np.ndarray]:
    """Centres `[n, F, 1, 1]` (x, y): still for in-place motions, else 1.6-2.2 pixels a frame
    along the motion's direction, starting where the whole path stays inside the frame."""
    margin = reach + 1
    cx, cy = _col(rng.uniform(margin, FRAME_SIZE - margin, n)), _col(rng.uniform(margin, FRAME_SIZE - margin, n))
    direction = {"right": (1, 0), "left": (-1, 0), "down": (0, 1), "up": (0, -1)}.get(motion)
    if direction is None:
        cx = _col(rng.uniform(FRAME_SIZE / 2 - 3, FRAME_SIZE / 2 + 3, n))
        cy = _col(rng.uniform(FRAME_SIZE / 2 - 3, FRAME_SIZE / 2 + 3, n))
        return cx + 0 * STEPS, cy + 0 * STEPS
    speed = _col(rng.uniform(1.6, 2.2, n))
    travel = speed * (NUM_FRAMES - 1)
    start = _col(rng.uniform(0, 1, n)) * (FRAME_SIZE - 2 * margin - travel) + margin  # [n, 1, 1, 1]
    along = start + speed * STEPS
    dx, dy = direction
    if dx:
        return (along if dx > 0 else FRAME_SIZE - along), cy + 0 * STEPS
    return cx + 0 * STEPS, (along if dy > 0 else FRAME_SIZE - along)


def _sdf(shape: str, u: np.ndarray, v: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Signed distance (pixels, negative inside) of an upright `shape` of `size` at offsets (u, v)."""
    if shape == "circle":
        return np.hypot(u, v) - size
    if shape == "square":
        return np.maximum(np.abs(u), np.abs(v)) - size * 0.85
    if shape == "triangle":  # apex up; size is the circumradius
        edges = [u * np.cos(b) + v * np.sin(b) for b in (np.pi / 2, np.pi / 2 + 2 * np.pi / 3, np.pi / 2 + 4 * np.pi / 3)]
        return np.maximum.reduce(edges) - size / 2
    if shape == "cross":
        half_width = size * 0.35
        bar1 = np.maximum(np.abs(u) - size, np.abs(v) - half_width)
        bar2 = np.maximum(np.abs(u) - half_width, np.abs(v) - size)
        return np.minimum(bar1, bar2)
    raise AssertionError(f"{shape} is not a shape")


def _far_from(rng, *references: tuple[np.ndarray, float]) -> np.ndarray:
    """`[n, 3]` palette colours, each uniform among those at least `dist` (RGB) from every
    `(colours [n, 3], dist)` reference (the farthest from the first when none is)."""
    far = np.ones((len(references[0][0]), len(PALETTE)), dtype=bool)
    for colours, dist in references:
        far &= np.linalg.norm(PALETTE[None] - colours[:, None], axis=-1) >= dist
    fallback = np.linalg.norm(PALETTE[None] - references[0][0][:, None], axis=-1)  # [n, P]
    score = np.where(far.any(1, keepdims=True), rng.random(far.shape) * far, fallback)
    return PALETTE[score.argmax(1)].astype(np.float32)


def _render_class(label: int, rng, n: int) -> np.ndarray:
    """`n` videos `[n, F, 3, H, W]` in [0, 1] of one class."""
    shape, motion = CLASSES[label]
    background, bg_mean = _background(rng, n)
    size = _col(rng.uniform(5.0, 7.0, n)) * (CROSS_SCALE if shape == "cross" else 1.0)
    if motion == "grow":
        size = _col(rng.uniform(2.5, 3.5, n)) + _col(rng.uniform(1.0, 1.3, n)) * STEPS  # [n, F, 1, 1]
    cx, cy = _trajectory(rng, n, motion, reach=float(size.max()) if motion != "grow" else 12.0)
    u, v = X - cx, Y - cy  # [n, F, H, W]
    if motion == "rotate":
        turn = _col(rng.choice([-1.0, 1.0], n) * rng.uniform(0.10, 0.16, n)) * STEPS  # radians
        u, v = u * np.cos(turn) + v * np.sin(turn), -u * np.sin(turn) + v * np.cos(turn)
    cover = np.clip(0.5 - _sdf(shape, u, v, size), 0.0, 1.0)[:, :, None]  # [n, F, 1, H, W]
    paint = _contrasting(rng, bg_mean)[:, None, :, None, None]  # [n, 1, 3, 1, 1]
    if motion == "colour":
        second = _far_from(rng, (paint[:, 0, :, 0, 0], 0.7), (bg_mean, 0.45))
        t = (STEPS / (NUM_FRAMES - 1))[..., None]  # [1, F, 1, 1, 1]
        paint = paint + (second[:, None, :, None, None] - paint) * t
    return background[:, None] * (1 - cover) + paint * cover


def render(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draws one random video per label.

    Args:
        labels (`np.ndarray`): integer class indices `[N]` in [0, NUM_CLASSES).
        rng (`np.random.Generator`): the source of every random draw.

    Returns:
        float32 `[N, NUM_FRAMES, 3, 32, 32]` in [-1, 1].
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or (labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES)):
        raise ValueError(f"labels must be a 1-D array of class indices in [0, {NUM_CLASSES}), got {labels!r}")
    out = np.empty((len(labels), NUM_FRAMES, 3, FRAME_SIZE, FRAME_SIZE), dtype=np.float32)
    for label in range(NUM_CLASSES):
        idx = np.flatnonzero(labels == label)
        if len(idx):
            out[idx] = np.clip(_render_class(label, rng, len(idx)), 0, 1) * 2 - 1
    return out


def generate(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` videos of balanced labels (`index % NUM_CLASSES`) drawn from `seed` alone."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    labels = np.arange(n) % NUM_CLASSES
    return torch.from_numpy(render(labels, np.random.default_rng(seed))), torch.from_numpy(labels).long()


def load_split(split: str, n: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Videos `start .. start+n-1` of a split ("train" or "heldout"), and their labels."""
    if split not in SPLIT_SEEDS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLIT_SEEDS)}")
    if n < 0 or start < 0:
        raise ValueError(f"n and start must be >= 0, got n={n}, start={start}")
    if n == 0:
        return torch.empty(0, NUM_FRAMES, 3, FRAME_SIZE, FRAME_SIZE), torch.empty(0, dtype=torch.long)
    first, last = start // CHUNK, (start + n - 1) // CHUNK
    parts = [generate(CHUNK, SPLIT_SEEDS[split] + c) for c in range(first, last + 1)]
    offset = start - first * CHUNK
    videos, labels = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    return videos[offset : offset + n], labels[offset : offset + n]
