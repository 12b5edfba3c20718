"""Conversions between image tensors in [-1, 1] and PIL images, and image grids."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image


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
