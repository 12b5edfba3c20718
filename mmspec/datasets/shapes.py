"""Shapes: a procedural, class-labelled image dataset generated deterministically from a seed.

Ten classes a person recognises at a glance (`CLASS_NAMES`), drawn at 64x64 RGB with
random colours (from a 15-colour palette, jittered), position, size, phase, background
gradient, low-frequency background texture and faint pixel noise, so that images are
never flat and their VQ tokens are far from deterministic. Shapes are drawn from signed
distance functions in pixel units and anti-aliased by coverage `clip(0.5 - sdf, 0, 1)`;
everything is vectorised in numpy.

Objects stand upright and flat-coloured, and only stripes turn to a random angle: a
raster-order GPT small enough to train on 2 CPU cores draws axis-aligned edges by copying
the row above, while rotated shapes and fill textures spent its capacity on edge codes
and came out as blobs.

Images are float32 `[N, 3, 64, 64]` in [-1, 1]; labels are long `[N]`, balanced
(`label = index % 10`). A split is a range of seeds: image i of a split lies in chunk
`i // CHUNK`, drawn from `numpy.random.default_rng(SPLIT_SEEDS[split] + chunk)`, so the
first n images of a split do not depend on how many are asked for, and "train" and
"heldout" never share a seed.

Example:
    >>> from mmspec.datasets.shapes import load_split
    >>> images, labels = load_split("heldout", 20)
    >>> images.shape, labels[:12].tolist()
    (torch.Size([20, 3, 64, 64]), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1])
"""

from __future__ import annotations

import numpy as np
import torch

CLASS_NAMES = ("circle", "square", "triangle", "ring", "cross", "star", "stripes", "checkerboard", "dots", "sunset")
NUM_CLASSES = len(CLASS_NAMES)
IMAGE_SIZE = 64
CHUNK = 1000  # images per seed
# a split is the seed range [base, base + chunks): far apart, so splits never overlap
SPLIT_SEEDS = {"train": 0, "heldout": 1_000_000}

# every colour is one of these, jittered by up to COLOUR_JITTER per channel: a palette
# gives the VQ a code per colour instead of a dither between neighbouring codes
PALETTE = np.array([
    [0.85, 0.15, 0.15], [0.95, 0.55, 0.10], [0.95, 0.90, 0.20], [0.60, 0.85, 0.20], [0.15, 0.60, 0.25],
    [0.10, 0.55, 0.55], [0.30, 0.80, 0.95], [0.15, 0.30, 0.85], [0.50, 0.25, 0.75], [0.85, 0.25, 0.70],
    [0.98, 0.70, 0.75], [0.50, 0.30, 0.15], [0.95, 0.95, 0.92], [0.50, 0.50, 0.50], [0.10, 0.10, 0.12],
], dtype=np.float32)  # red, orange, yellow, lime, green, teal, cyan, blue, purple, magenta, pink, brown, white, grey, black
COLOUR_JITTER = 0.05

_xy = np.arange(IMAGE_SIZE, dtype=np.float32) + 0.5  # pixel centres
Y = _xy[None, :, None]  # [1, H, 1]
X = _xy[None, None, :]  # [1, 1, W]


def _col(v: np.ndarray) -> np.ndarray:
    """Per-image parameters `[n]` -> `[n, 1, 1]`, to broadcast against pixel grids."""
    return v.astype(np.float32)[:, None, None]


def _coverage(sdf: np.ndarray) -> np.ndarray:
    """Anti-aliased inside-ness of a signed distance (pixels; negative inside)."""
    return np.clip(0.5 - sdf, 0.0, 1.0)


def _rotated(rng, n: int, cx, cy, max_angle: float) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates `[n, H, W]` relative to centres (cx, cy), rotated by a random angle."""
    a = _col(rng.uniform(0, max_angle, n))
    dx, dy = X - cx, Y - cy
    return dx * np.cos(a) + dy * np.sin(a), -dx * np.sin(a) + dy * np.cos(a)


def _jittered(rng, colours: np.ndarray) -> np.ndarray:
    return np.clip(colours + rng.uniform(-COLOUR_JITTER, COLOUR_JITTER, colours.shape), 0.0, 1.0).astype(np.float32)


def _random_colours(rng, n: int) -> np.ndarray:
    """`[n, 3]` palette colours, jittered."""
    return _jittered(rng, PALETTE[rng.integers(len(PALETTE), size=n)])


def _contrasting(rng, reference: np.ndarray, min_dist: float = 0.55) -> np.ndarray:
    """`[n, 3]` palette colours (jittered), each drawn uniformly from those at least
    `min_dist` (RGB, Euclidean) from its `reference [n, 3]` colour."""
    far = np.linalg.norm(PALETTE[None] - reference[:, None], axis=-1) >= min_dist  # [n, P]
    pick = (rng.random(far.shape) * far).argmax(axis=1)  # uniform among the far ones
    return _jittered(rng, PALETTE[pick])


def _background(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """A random linear gradient between two colours with a low-frequency wave texture.
    Returns images `[n, 3, H, W]` in [0, 1] and their mean colours `[n, 3]`."""
    c1, c2 = _random_colours(rng, n), _random_colours(rng, n)
    c2 = c1 + 0.3 * (c2 - c1)  # a gentle gradient, so shapes stay the main content
    a = _col(rng.uniform(0, 2 * np.pi, n))
    t = ((X - 32) * np.cos(a) + (Y - 32) * np.sin(a)) / 64 + 0.5  # [n, H, W], about [0, 1]
    img = c1[:, :, None, None] + (c2 - c1)[:, :, None, None] * t[:, None]
    # two random plane waves of 1-3 periods per image: a soft cloudy texture
    for _ in range(2):
        k = _col(rng.uniform(1, 3, n)) * 2 * np.pi / 64
        b = _col(rng.uniform(0, 2 * np.pi, n))
        ph = _col(rng.uniform(0, 2 * np.pi, n))
        amp = _col(rng.uniform(0.02, 0.05, n))
        img = img + (amp * np.sin(k * (X * np.cos(b) + Y * np.sin(b)) + ph))[:, None]
    return img, (c1 + c2) / 2


def _shape_sdf(label: int, rng, n: int) -> np.ndarray:
    """Signed distances `[n, H, W]` (pixels) of n random shapes of one object class."""
    cx, cy = _col(rng.uniform(20, 44, n)), _col(rng.uniform(20, 44, n))
    u, v = X - cx, Y - cy  # upright: v points down
    name = CLASS_NAMES[label]
    if name == "circle":
        r = _col(rng.uniform(12, 20, n))
        return np.hypot(u, v) - r
    if name == "square":
        return np.maximum(np.abs(u), np.abs(v)) - _col(rng.uniform(11, 18, n))
    if name == "triangle":  # apex up, base horizontal
        inradius = _col(rng.uniform(8, 13, n))
        edges = [u * np.cos(b) + v * np.sin(b) for b in (np.pi / 2, np.pi / 2 + 2 * np.pi / 3, np.pi / 2 + 4 * np.pi / 3)]
        return np.maximum.reduce(edges) - inradius
    if name == "ring":
        r, half_width = _col(rng.uniform(12, 20, n)), _col(rng.uniform(3.0, 5.0, n))
        return np.abs(np.hypot(u, v) - r) - half_width
    if name == "cross":
        arm, half_width = _col(rng.uniform(14, 22, n)), _col(rng.uniform(4.0, 6.0, n))
        bar1 = np.maximum(np.abs(u) - arm, np.abs(v) - half_width)
        bar2 = np.maximum(np.abs(u) - half_width, np.abs(v) - arm)
        return np.minimum(bar1, bar2)
    if name == "star":  # a point up
        outer = _col(rng.uniform(16, 22, n))
        inner = outer * _col(rng.uniform(0.38, 0.5, n))
        # fold the angle into [0, pi/5]: 0 towards a point, pi/5 towards an inner vertex
        alpha = (np.arctan2(v, u) + np.pi / 2) % (2 * np.pi / 5)
        beta = np.minimum(alpha, 2 * np.pi / 5 - alpha)
        # radius of the straight edge from the point (outer, 0) to the inner vertex, along beta
        px, py = inner * np.cos(np.pi / 5), inner * np.sin(np.pi / 5)
        edge = outer * py / (np.cos(beta) * py - np.sin(beta) * (px - outer))
        return np.hypot(u, v) - edge
    if name == "dots":  # an axis-aligned lattice; (cx, cy) sets its phase
        spacing = _col(rng.uniform(10, 16, n))
        r = spacing * _col(rng.uniform(0.2, 0.3, n))
        du = (u / spacing + 0.5) % 1 - 0.5
        dv = (v / spacing + 0.5) % 1 - 0.5
        return np.hypot(du, dv) * spacing - r
    raise AssertionError(f"{name} is not an object class")


def _two_tone(rng, n: int, pattern: np.ndarray) -> np.ndarray:
    """Images `[n, 3, H, W]` painting `pattern [n, H, W]` (1 = first colour) in two
    contrasting random colours, shaded by a soft gradient."""
    c1 = _random_colours(rng, n)
    c2 = _contrasting(rng, c1)
    img = c2[:, :, None, None] + (c1 - c2)[:, :, None, None] * pattern[:, None]
    a = _col(rng.uniform(0, 2 * np.pi, n))
    shade = 1 - _col(rng.uniform(0, 0.3, n)) * (((X - 32) * np.cos(a) + (Y - 32) * np.sin(a)) / 64 + 0.5)
    return img * shade[:, None]


def _pattern(label: int, rng, n: int) -> np.ndarray:
    """Full-frame classes: stripes, checkerboard, sunset; images `[n, 3, H, W]` in [0, 1]."""
    name = CLASS_NAMES[label]
    cx, cy = _col(rng.uniform(0, 64, n)), _col(rng.uniform(0, 64, n))
    if name == "stripes":
        u, _ = _rotated(rng, n, cx, cy, np.pi)
        period = _col(rng.uniform(8, 16, n))
        return _two_tone(rng, n, np.clip(np.sin(2 * np.pi * u / period) * period / 4 + 0.5, 0, 1))
    if name == "checkerboard":  # axis-aligned; (cx, cy) sets its phase
        u, v = X - cx, Y - cy
        cell = _col(rng.uniform(7, 13, n))
        s = np.sin(np.pi * u / cell) * np.sin(np.pi * v / cell)
        return _two_tone(rng, n, np.clip(s * cell / 2 + 0.5, 0, 1))
    if name == "sunset":
        horizon = _col(rng.uniform(36, 50, n))
        top = np.clip(np.array([0.15, 0.1, 0.45]) + rng.uniform(-0.15, 0.15, (n, 3)), 0, 1).astype(np.float32)
        low = np.clip(np.array([0.95, 0.45, 0.2]) + rng.uniform(-0.15, 0.15, (n, 3)), 0, 1).astype(np.float32)
        t = np.clip(Y / horizon, 0, 1)  # [n, H, 1]: 0 at the top, 1 at the horizon
        sky = top[:, :, None, None] + (low - top)[:, :, None, None] * t[:, None]
        sky = np.broadcast_to(sky, (n, 3, IMAGE_SIZE, IMAGE_SIZE))
        r = _col(rng.uniform(6, 12, n))
        sun_y = horizon - r * _col(rng.uniform(-0.3, 0.7, n))
        sun_colour = np.clip(np.array([1.0, 0.9, 0.45]) + rng.uniform(-0.1, 0.05, (n, 3)), 0, 1).astype(np.float32)
        sun = _coverage(np.hypot(X - cx, Y - sun_y) - r)[:, None]
        img = sky * (1 - sun) + sun_colour[:, :, None, None] * sun
        ground_colour = (rng.uniform(0.02, 0.2, (n, 3)) * np.array([1.0, 0.8, 1.0])).astype(np.float32)
        ground = _coverage(horizon - Y)[:, None]  # below the horizon line
        return img * (1 - ground) + ground_colour[:, :, None, None] * ground
    raise AssertionError(f"{name} is not a pattern class")


PATTERN_CLASSES = {CLASS_NAMES.index(c) for c in ("stripes", "checkerboard", "sunset")}


def render(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Draws one random image per label.

    Args:
        labels (`np.ndarray`): integer class indices `[N]` in [0, NUM_CLASSES).
        rng (`np.random.Generator`): the source of every random draw.

    Returns:
        float32 `[N, 3, 64, 64]` in [-1, 1].
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or (labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES)):
        raise ValueError(f"labels must be a 1-D array of class indices in [0, {NUM_CLASSES}), got shape {labels.shape}")
    out = np.empty((len(labels), 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)
    for label in range(NUM_CLASSES):
        idx = np.flatnonzero(labels == label)
        n = len(idx)
        if n == 0:
            continue
        if label in PATTERN_CLASSES:
            img = _pattern(label, rng, n)
        else:
            img, bg_mean = _background(rng, n)
            paint = _contrasting(rng, bg_mean)[:, :, None, None]
            cover = _coverage(_shape_sdf(label, rng, n))[:, None]
            img = img * (1 - cover) + paint * cover
        # faint: stronger pixel noise makes the VQ's codes flip between near neighbours
        # of the same content, entropy the GPT would have to model for nothing
        noise = _col(rng.uniform(0.0, 0.015, n))[:, None] * rng.standard_normal(img.shape, dtype=np.float32)
        out[idx] = np.clip(img + noise, 0, 1) * 2 - 1
    return out


def generate(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` images of balanced labels (`index % NUM_CLASSES`) drawn from `seed` alone.

    Returns images float32 `[n, 3, 64, 64]` in [-1, 1] and labels long `[n]`.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    labels = np.arange(n) % NUM_CLASSES
    images = render(labels, np.random.default_rng(seed))
    return torch.from_numpy(images), torch.from_numpy(labels).long()


def load_split(split: str, n: int, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Images `start .. start+n-1` of a split ("train" or "heldout").

    Args:
        split (`str`): "train" or "heldout"; they are drawn from disjoint seed ranges.
        n (`int`): how many images.
        start (`int`, *optional*, defaults to 0): index of the first image.

    Returns:
        images float32 `[n, 3, 64, 64]` in [-1, 1] and labels long `[n]`.
    """
    if split not in SPLIT_SEEDS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLIT_SEEDS)}")
    if n < 0 or start < 0:
        raise ValueError(f"n and start must be >= 0, got n={n}, start={start}")
    first, last = start // CHUNK, (start + n - 1) // CHUNK
    parts = [generate(CHUNK, SPLIT_SEEDS[split] + c) for c in range(first, last + 1)] if n else []
    if not parts:
        return torch.empty(0, 3, IMAGE_SIZE, IMAGE_SIZE), torch.empty(0, dtype=torch.long)
    images = torch.cat([p[0] for p in parts])
    labels = torch.cat([p[1] for p in parts])
    offset = start - first * CHUNK
    return images[offset : offset + n], labels[offset : offset + n]
