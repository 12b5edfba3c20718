"""Writing and picturing generated videos: GIF through Pillow (a core dependency), MP4 through
PyAV, and commit-order heatmaps frame by frame.

PyAV (`pip install av`, pulled in by the `video` extra) carries its own FFmpeg libraries
in its wheels, so MP4 needs nothing outside pip. We call it directly rather than through
`torchvision.io.write_video`, which torchvision deprecates since 0.22.

Example:
    >>> import numpy as np
    >>> frames = np.zeros((8, 32, 32, 3), dtype=np.uint8)
    >>> save_video(frames, "clip.gif", fps=8, scale=4)  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from mmspec.io.images import commit_heatmap

VIDEO_FORMATS = {"gif": "Pillow", "mp4": "PyAV"}


def video_format(path: str | Path) -> str:
    """The format of `path` by its suffix (see `check_format`)."""
    return check_format(Path(path).suffix.lower().lstrip("."))


def check_format(fmt: str) -> str:
    """`fmt` ("gif", "mp4"), refused in one line when unknown or when its encoder is not
    installed (check this before generating anything)."""
    if fmt not in VIDEO_FORMATS:
        raise ValueError(f"unknown video format {fmt!r}; choose from {', '.join(VIDEO_FORMATS)}")
    if fmt == "mp4" and importlib.util.find_spec("av") is None:
        raise ValueError("writing MP4 needs PyAV, which is not installed: pip install av (or mmspec[video]), or write a .gif")
    return fmt


def upscale(frames: np.ndarray, scale: int) -> np.ndarray:
    """`frames [F, H, W, 3]` with every pixel repeated `scale` x `scale` times."""
    return frames if scale == 1 else frames.repeat(scale, axis=1).repeat(scale, axis=2)


def save_video(frames: np.ndarray, path: str | Path, fps: int = 8, scale: int = 1, fmt: str | None = None) -> Path:
    """Writes uint8 `frames [F, H, W, 3]` to `path` as `fmt` (by default its suffix: .gif or
    .mp4), each pixel `scale` times larger (nearest neighbour: 32x32 frames are tiny)."""
    fmt = video_format(path) if fmt is None else check_format(fmt)
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise ValueError(f"scale must be an integer >= 1, got {scale!r}")
    if not (isinstance(fps, int) and not isinstance(fps, bool) and 1 <= fps <= 120):
        raise ValueError(f"fps must be an integer in [1, 120], got {fps!r}")
    frames = upscale(np.asarray(frames, dtype=np.uint8), scale)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "gif":
        images = [Image.fromarray(f) for f in frames]
        images[0].save(path, format="GIF", save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
        return path
    _write_mp4(frames, path, fps)
    return path


def _write_mp4(frames: np.ndarray, path: Path, fps: int) -> None:
    import av

    F, H, W, _ = frames.shape
    if H % 2 or W % 2:  # yuv420p halves the chroma planes
        frames = np.pad(frames, ((0, 0), (0, H % 2), (0, W % 2), (0, 0)), mode="edge")
    with av.open(str(path), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=fps)
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())  # flush


def frame_heatmaps(commit_iteration: torch.Tensor, frames: int, grid: tuple[int, int], size: int = 96, gap: int = 4) -> Image.Image:
    """The forward that committed each token (`commit_iteration [F * rows * cols]`), one
    heatmap per frame side by side, on one colour scale for the whole video (dark = early,
    yellow = late): with previous-frame drafts, later frames light up in few forwards."""
    rows, cols = grid
    tall = commit_heatmap(commit_iteration.reshape(-1)[: frames * rows * cols], (frames * rows, cols), size=size)
    height = tall.height // frames
    strip = Image.new("RGB", (frames * (size + gap) - gap, height), "white")
    for f in range(frames):
        strip.paste(tall.crop((0, f * height, size, (f + 1) * height)), (f * (size + gap), 0))
    return strip
