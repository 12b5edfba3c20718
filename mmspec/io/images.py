"""Conversions between image tensors in [-1, 1] and PIL images, image grids, and image
files read from the user (their size checked from the header, before any pixel)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont, UnidentifiedImageError

from mmspec.core.bounds import MAX_IMAGE_PIXELS, check_image_pixels


def open_checked(path: str | Path, what: str = "image") -> Image.Image:
    """The image in `path`, opened lazily (its header read, no pixel decoded), refused in
    one line naming the file when it is no image or has more than `MAX_IMAGE_PIXELS`
    pixels (a 30,000 x 30,000 PNG is 109 kB on disk and 2.7 GB decoded). Use it as a
    context manager, as `Image.open`."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # ours is the lower cap, checked below
            image = Image.open(path)
    except Image.DecompressionBombError:  # past PIL's own cap, which refuses before the size can be read
        raise ValueError(f"{what} {str(path)!r} has more than the {MAX_IMAGE_PIXELS:,} pixels mmspec reads; resize it first") from None
    except (OSError, UnidentifiedImageError) as err:
        raise ValueError(f"cannot read {what} {str(path)!r}: {err}") from None
    try:
        check_image_pixels(*image.size, repr(str(path)))
    except ValueError:
        image.close()
        raise
    return image


def read_rgb(path: str | Path, what: str = "image") -> Image.Image:
    """The RGB pixels of the image in `path` (`open_checked` first), or a one-line
    ValueError naming the file (a truncated file included)."""
    with open_checked(path, what) as image:
        try:
            return image.convert("RGB")
        except OSError as err:
            raise ValueError(f"cannot read {what} {str(path)!r}: {err}") from None


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """`[B, 3, H, W]` floats in [-1, 1] -> `[B, H, W, 3]` uint8 (LlamaGen's `x*127.5+128`, clamped)."""
    x = (images.detach().float().cpu() * 127.5 + 128).clamp(0, 255).to(torch.uint8)
    return x.permute(0, 2, 3, 1).numpy()


def to_pil(images: torch.Tensor) -> list[Image.Image]:
    return [Image.fromarray(a) for a in to_uint8(images)]


def image_grid(images: list[Image.Image], cols: int, pad: int = 2, scale: int = 1) -> Image.Image:
    """Tiles equally sized images row by row, `cols` per row, on a white background."""
    w, h = images[0].size
    rows = -(-len(images) // cols)
    grid = Image.new("RGB", (cols * (w + pad) + pad, rows * (h + pad) + pad), "white")
    for i, im in enumerate(images):
        grid.paste(im, (pad + (i % cols) * (w + pad), pad + (i // cols) * (h + pad)))
    if scale != 1:
        grid = grid.resize((grid.width * scale, grid.height * scale), Image.NEAREST)
    return grid


def wrap_to_width(text: str, font, width: int, max_lines: int) -> list[str]:
    """Words of `text` in lines no wider than `width` pixels, at most `max_lines` of them
    (the last one ends in "..." when text is left over; a word too long is cut)."""
    lines, words = [], text.split()
    while words and len(lines) < max_lines:
        line = words.pop(0)
        while words and font.getlength(f"{line} {words[0]}") <= width:
            line = f"{line} {words.pop(0)}"
        lines.append(line)
    if words or (lines and font.getlength(lines[-1]) > width):
        last = lines[-1]
        while last and font.getlength(last + "...") > width:
            last = last[:-1]
        lines[-1] = last + "..."
    return lines


def label_rows(grid: Image.Image, labels: list[str], font_size: int = 16, max_width: int = 260) -> Image.Image:
    """`grid` with a column on its left naming each of its `len(labels)` equally tall rows
    (class names or prompts, wrapped to `max_width` pixels), in black on white."""
    font = ImageFont.load_default(size=font_size)
    row_h = grid.height / len(labels)
    line_h = font_size + 4
    max_lines = max(1, int(row_h // line_h))
    wrapped = [wrap_to_width(label, font, max_width, max_lines) for label in labels]
    margin = font_size // 2
    width = int(max((font.getlength(line) for lines in wrapped for line in lines), default=0)) + 2 * margin
    out = Image.new("RGB", (width + grid.width, grid.height), "white")
    out.paste(grid, (width, 0))
    draw = ImageDraw.Draw(out)
    for r, lines in enumerate(wrapped):
        top = r * row_h + (row_h - len(lines) * line_h) / 2
        for i, line in enumerate(lines):
            draw.text((width - margin - font.getlength(line), top + i * line_h), line, fill="black", font=font)
    return out


# viridis at 0, .25, .5, .75, 1 (enough anchors for a readable ramp)
_RAMP = torch.tensor([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], dtype=torch.float32)


def commit_heatmap(commit_iteration: torch.Tensor, grid: tuple[int, int], size: int = 256) -> Image.Image:
    """The forward at which each token was committed, as a picture: `commit_iteration [T]`
    on a `grid` (rows, cols), dark = early, yellow = late, scaled to `size` pixels wide."""
    rows, cols = grid
    it = commit_iteration.detach().float().cpu().reshape(rows, cols)
    x = (it - it.min()) / max(float(it.max() - it.min()), 1.0) * (len(_RAMP) - 1)
    lo = x.floor().long().clamp(max=len(_RAMP) - 2)
    frac = (x - lo)[..., None]
    rgb = _RAMP[lo] * (1 - frac) + _RAMP[lo + 1] * frac
    image = Image.fromarray(rgb.round().to(torch.uint8).numpy())
    return image.resize((size, size * rows // cols), Image.NEAREST)
