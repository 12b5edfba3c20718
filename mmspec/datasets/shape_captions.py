"""Shapes images with the attributes that drew them, and procedural captions of them.

`mmspec.datasets.shapes` renders images from a seed but keeps no record of what it drew.
`render_scenes` draws the same images (object classes through the same helpers in the
same order, so `shapes.render` on the same labels and seed gives identical pixels) and
reads back, per image, a `Scene`: the class, the object's colour (the palette colour
nearest to its paint), the background colour (nearest to the background's mean), the
object's size and position (from its coverage mask) and a pattern word.

`caption(scene, rng)` writes one of several templates (30-60 tokens) about a scene, and
`caption_correct(text, scene)` checks a caption's class word, object colour and
background colour against the scene.

Example:
    >>> from mmspec.datasets.shape_captions import load_scenes, caption
    >>> import numpy as np
    >>> images, scenes = load_scenes("heldout", 10)
    >>> scenes[0].class_name, images.shape
    ('circle', torch.Size([10, 3, 64, 64]))
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

from mmspec.datasets import shapes
from mmspec.datasets.shapes import CLASS_NAMES, IMAGE_SIZE, NUM_CLASSES, PALETTE, PATTERN_CLASSES

# the names of shapes.PALETTE's colours, in its order
COLOUR_NAMES = ("red", "orange", "yellow", "lime", "green", "teal", "cyan", "blue", "purple", "magenta",
                "pink", "brown", "white", "grey", "black")
SIZES = ("small", "medium", "large")
# extent (pixels, the larger side of the mask's bounding box) at which an object turns
# medium and large: about the thirds of each class's own size range
# (for dots: minus the number of dots across)
SIZE_THRESHOLDS = {"circle": (29, 35), "square": (27, 31), "triangle": (33, 39), "ring": (38, 43),
                   "cross": (33, 39), "star": (33, 37), "dots": (-5, -4)}
ROWS, COLUMNS = ("top", "middle", "bottom"), ("left", "centre", "right")
# each class's noun in captions, and the word its "background" colour qualifies
OBJECT_NOUN = {**{c: c for c in CLASS_NAMES}, "sunset": "sun"}
BACKGROUND_NOUN = {**{c: "background" for c in CLASS_NAMES}, "sunset": "sky"}
SPLIT_SEEDS = {"train": 5_000_000, "heldout": 6_000_000}  # disjoint from shapes' own seeds
CHUNK = 1000


@dataclass(frozen=True)
class Scene:
    """What one Shapes image shows.

    `size` is "small", "medium" or "large"; `position` is "<row> <column>" on a 3x3 grid
    ("top left", "middle centre", ...); `pattern` is a class-specific word: the stripes'
    direction, the checkerboard's cells, the dots' spacing, the sunset's horizon, or
    "waves" (the soft texture behind every object class).
    """

    label: int
    object_colour: str
    background_colour: str
    size: str
    position: str
    pattern: str

    @property
    def class_name(self) -> str:
        return CLASS_NAMES[self.label]


class _Recorder:
    """A numpy Generator that keeps every draw (method name, result) it hands out, so the
    attributes of a Shapes pattern can be read from the draws that made it."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.draws = rng, []

    def __getattr__(self, method):
        def draw(*args, **kwargs):
            out = getattr(self.rng, method)(*args, **kwargs)
            self.draws.append((method, out))
            return out
        return draw


class _Replay:
    """Hands out recorded draws again, in order, to re-run a Shapes helper."""

    def __init__(self, draws):
        self.draws = list(draws)

    def __getattr__(self, method):
        def draw(*args, **kwargs):
            name, out = self.draws.pop(0)
            assert name == method, f"replay expected {name}, got {method}"
            return out
        return draw


def nearest_colour(rgb: np.ndarray) -> np.ndarray:
    """Palette indices `[n]` of the palette colours nearest to `rgb [n, 3]`."""
    return np.linalg.norm(rgb[:, None] - PALETTE[None], axis=-1).argmin(axis=1)


def _grid_cell(coord: np.ndarray, names: tuple[str, ...]) -> list[str]:
    """Thirds of the range of object centres (20..44 pixels)."""
    return [names[int(np.clip((c - 20) // 8, 0, 2))] for c in coord]


def _object_scenes(label: int, rng, n: int) -> tuple[np.ndarray, list[Scene]]:
    img, bg_mean = shapes._background(rng, n)
    paint = shapes._contrasting(rng, bg_mean)
    cover = shapes._coverage(shapes._shape_sdf(label, rng, n))  # [n, H, W]
    img = img * (1 - cover[:, None]) + paint[:, :, None, None] * cover[:, None]
    name = CLASS_NAMES[label]
    yy, xx = np.mgrid[:IMAGE_SIZE, :IMAGE_SIZE] + 0.5
    mass = cover.sum(axis=(1, 2))
    cx, cy = (cover * xx).sum(axis=(1, 2)) / mass, (cover * yy).sum(axis=(1, 2)) / mass
    inside = cover > 0.5
    width = inside.any(axis=1).sum(axis=1)
    height = inside.any(axis=2).sum(axis=1)
    extent = np.maximum(width, height)
    if name == "dots":  # a lattice over the frame: fewer dots across are larger, no position
        extent = -_dots_per_row(inside)
    mid, large = SIZE_THRESHOLDS[name]
    sizes = [SIZES[int(e >= mid) + int(e >= large)] for e in extent]
    rows, cols = _grid_cell(cy, ROWS), _grid_cell(cx, COLUMNS)
    objects, backgrounds = nearest_colour(paint), nearest_colour(bg_mean)
    scenes = [Scene(label, COLOUR_NAMES[o], COLOUR_NAMES[b], s, "everywhere" if name == "dots" else f"{r} {c}", "waves")
              for o, b, s, r, c in zip(objects, backgrounds, sizes, rows, cols)]
    return img, scenes


def _dots_per_row(inside: np.ndarray) -> np.ndarray:
    """The most runs of covered pixels along any row of each mask `[n, H, W]`: how many
    dots fit across the lattice."""
    starts = (np.diff(inside.astype(np.int8), axis=2) == 1).sum(axis=2) + inside[:, :, 0]  # [n, H]
    return starts.max(axis=1)


def _pattern_scenes(label: int, rng, n: int) -> tuple[np.ndarray, list[Scene]]:
    recorder = _Recorder(rng)
    img = shapes._pattern(label, recorder, n)
    uniform = [out for method, out in recorder.draws if method == "uniform"]
    name = CLASS_NAMES[label]
    if name == "sunset":  # fixed colours: a yellow sun over a purple sky; cx is the sun's column
        cx, horizon = uniform[0], uniform[2]
        cols = [COLUMNS[int(np.clip(c // 22, 0, 2))] for c in cx]
        scenes = [Scene(label, "yellow", "purple", "medium", f"bottom {c}", "low" if h >= 43 else "high")
                  for c, h in zip(cols, horizon)]
        return img, scenes
    # two tones: first = palette[integers draw] jittered, second = _contrasting's pick,
    # replayed from the draws that made them
    at = next(i for i, (method, _) in enumerate(recorder.draws) if method == "integers")
    first_index = recorder.draws[at][1]
    first = shapes._jittered(_Replay(recorder.draws[at + 1 : at + 2]), PALETTE[first_index])
    second = shapes._contrasting(_Replay(recorder.draws[at + 2 : at + 4]), first)
    if name == "stripes":  # stripes run across the direction angle uniform[2] in [0, pi)
        angle = np.degrees(uniform[2]) % 180
        patterns = ["vertical" if a < 22.5 or a >= 157.5 else "horizontal" if 67.5 <= a < 112.5 else "diagonal"
                    for a in angle]
    else:  # checkerboard cells of 7..13 pixels
        patterns = ["small" if c < 10 else "large" for c in uniform[2]]
    # the two tones cover equal shares, so the pixels cannot tell which one was drawn
    # first: the pattern is named by the tone earlier in the palette, the background by
    # the other, a rule a captioner can learn
    scenes = [Scene(label, COLOUR_NAMES[min(f, s)], COLOUR_NAMES[max(f, s)], "large", "everywhere", p)
              for f, s, p in zip(first_index, nearest_colour(second), patterns)]
    return img, scenes


def render_scenes(labels: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, list[Scene]]:
    """Shapes images `[N, 3, 64, 64]` in [-1, 1] for `labels [N]`, and their scenes.

    Draws in `shapes.render`'s order (class by class, the pixel noise last), so its pixels
    equal `shapes.render(labels, rng)` for the same generator state.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or (labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES)):
        raise ValueError(f"labels must be a 1-D array of class indices in [0, {NUM_CLASSES}), got shape {labels.shape}")
    out = np.empty((len(labels), 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.float32)
    scenes: list[Scene | None] = [None] * len(labels)
    for label in range(NUM_CLASSES):
        idx = np.flatnonzero(labels == label)
        if len(idx) == 0:
            continue
        draw = _pattern_scenes if label in PATTERN_CLASSES else _object_scenes
        img, class_scenes = draw(label, rng, len(idx))
        noise = shapes._col(rng.uniform(0.0, 0.015, len(idx)))[:, None] * rng.standard_normal(img.shape, dtype=np.float32)
        out[idx] = np.clip(img + noise, 0, 1) * 2 - 1
        for i, scene in zip(idx, class_scenes):
            scenes[i] = scene
    return out, scenes


def load_scenes(split: str, n: int, start: int = 0) -> tuple[torch.Tensor, list[Scene]]:
    """Images `start .. start+n-1` of a caption split ("train" or "heldout") and their
    scenes; image i lies in chunk `i // 1000`, drawn from its own seed, labels balanced."""
    if split not in SPLIT_SEEDS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLIT_SEEDS)}")
    if n < 0 or start < 0:
        raise ValueError(f"n and start must be >= 0, got n={n}, start={start}")
    images, scenes = [], []
    for chunk in range(start // CHUNK, (start + n - 1) // CHUNK + 1) if n else []:
        img, sc = render_scenes(np.arange(CHUNK) % NUM_CLASSES, np.random.default_rng(SPLIT_SEEDS[split] + chunk))
        lo = max(start - chunk * CHUNK, 0)
        hi = min(start + n - chunk * CHUNK, CHUNK)
        images.append(torch.from_numpy(img[lo:hi]))
        scenes.extend(sc[lo:hi])
    return (torch.cat(images) if images else torch.empty(0, 3, IMAGE_SIZE, IMAGE_SIZE)), scenes


# ----------------------------------------------------------------------------- captions

_WHERE = {
    "top left": "in the top left corner", "top centre": "near the top", "top right": "in the top right corner",
    "middle left": "on the left side", "middle centre": "in the centre", "middle right": "on the right side",
    "bottom left": "in the bottom left corner", "bottom centre": "near the bottom",
    "bottom right": "in the bottom right corner", "everywhere": "all over the picture",
}

# {s}ize {o}bject colour {n}oun {w}here {b}ackground colour {bn} background noun {p}attern phrase
_OBJECT_TEMPLATES = (
    "a {s} {o} {n} sits {w} of the picture , on a {b} background with faint waves . the {n} is {o} , "
    "the background is {b} , and nothing else is in the picture .",
    "this picture shows a {s} {o} {n} {w} . behind it there is a {b} background , softly shaded with faint waves , "
    "and the {o} {n} stands out clearly against it .",
    "on a {b} background with faint waves , a {s} {o} {n} appears {w} . it is the only object in the picture , "
    "and its colour is {o} .",
    "the image contains one {s} {o} {n} , placed {w} . the {b} background around it is shaded with faint waves , "
    "so the {n} is easy to see .",
)
_DOTS_TEMPLATES = (
    "the picture is covered with {s} {o} dots on a {b} background . the dots are spaced evenly in rows and columns , "
    "and they fill the whole picture .",
    "{s} {o} dots are spread all over a {b} background in a regular grid , with faint waves behind them . "
    "there is no other object in the picture .",
    "this image shows a pattern of {s} {o} dots on a {b} background . every dot is {o} and the same size , "
    "and the rows of dots reach every edge .",
)
_STRIPES_TEMPLATES = (
    "the picture is filled with {p} {o} stripes on a {b} background . the stripes are evenly spaced across the image , "
    "and they reach every edge of it .",
    "{p} {o} stripes run across the whole image , alternating with bands of the {b} background between them . "
    "the stripes are {o} , and all of them are {p} .",
    "this image shows a pattern of {p} {o} stripes on a {b} background , softly shaded from one side to the other , "
    "with no other object in it .",
)
_CHECKER_TEMPLATES = (
    "the picture is a {o} checkerboard on a {b} background , with {p} cells that fill the whole image . "
    "the cells alternate between {o} and {b} in every row .",
    "a {o} checkerboard with {p} cells covers the image . its other cells show the {b} background between them , "
    "softly shaded from one side of the image to the other .",
    "this image shows a {o} checkerboard on a {b} background . the {p} cells alternate across rows and columns , "
    "and the pattern reaches every edge of the picture .",
)
_SUNSET_TEMPLATES = (
    "a sunset : a yellow sun sits {w} above a {p} horizon , under a purple sky that fades to orange near the dark "
    "ground . nothing else is in the picture .",
    "this picture shows a sunset . a round yellow sun hangs {w} over a {p} horizon , and the purple sky glows orange "
    "just above the dark ground below it .",
    "the image is a sunset with a yellow sun {w} . the purple sky turns orange towards a {p} horizon , and below the "
    "horizon the ground is dark .",
)


def caption(scene: Scene, rng: np.random.Generator | None = None, template: int | None = None) -> str:
    """One caption of `scene` (lower case, words and punctuation separated by spaces), from
    template number `template` (modulo the templates of its kind: objects have four, dots,
    stripes, checkerboards and sunsets three each), or from one drawn with `rng`."""
    name = scene.class_name
    templates = {"dots": _DOTS_TEMPLATES, "stripes": _STRIPES_TEMPLATES, "checkerboard": _CHECKER_TEMPLATES,
                 "sunset": _SUNSET_TEMPLATES}.get(name, _OBJECT_TEMPLATES)
    if (rng is None) == (template is None):
        raise ValueError("give caption() a template number or an rng to draw one, not both")
    template = templates[(rng.integers(len(templates)) if template is None else template) % len(templates)]
    where = _WHERE[scene.position]
    if name == "sunset":
        where = {"left": "on the left", "centre": "in the middle", "right": "on the right"}[scene.position.split()[1]]
    return template.format(s=scene.size, o=scene.object_colour, n=OBJECT_NOUN[name], w=where,
                           b=scene.background_colour, p=scene.pattern)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


def _colour_before(words: list[str], noun: str) -> str | None:
    """The colour word right before the first `noun` preceded by one (a size word may sit
    between), or None."""
    for i, w in enumerate(words):
        if w == noun:
            for j in (i - 1, i - 2):
                if j >= 0 and words[j] in COLOUR_NAMES:
                    return words[j]
    return None


# stripes and checkerboards are two tones in equal shares: the captions name the pattern
# by the tone earlier in the palette, but the pixels do not say which is which, so a
# caption that names the pair the other way round is right too
TWO_TONE_CLASSES = ("stripes", "checkerboard")


def caption_checks(text: str, scene: Scene) -> dict[str, bool]:
    """Whether `text` names the scene's class first among class words, and the right
    colours for its object and its background (for stripes and checkerboards, the two
    tones in either order)."""
    words = _words(text)
    first_class = next((w for w in words if w in CLASS_NAMES), None)
    name = scene.class_name
    named = (_colour_before(words, OBJECT_NOUN[name]), _colour_before(words, BACKGROUND_NOUN[name]))
    true = (scene.object_colour, scene.background_colour)
    if name in TWO_TONE_CLASSES and named == true[::-1]:
        named = true
    return {"class": first_class == name, "object_colour": named[0] == true[0], "background_colour": named[1] == true[1]}


def caption_correct(text: str, scene: Scene) -> bool:
    """All of `caption_checks`."""
    return all(caption_checks(text, scene).values())
