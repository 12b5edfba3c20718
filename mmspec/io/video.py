"""Reading and writing videos: GIF through Pillow (a core dependency), MP4 through PyAV, a
folder of PNG frames (read only); and commit-order heatmaps frame by frame.

PyAV (`pip install av`, pulled in by the `video` extra) carries its own FFmpeg libraries
in its wheels, so MP4 needs nothing outside pip. We call it directly rather than through
`torchvision.io.write_video`, which torchvision deprecates since 0.22.

Example:
    >>> import numpy as np
    >>> frames = np.zeros((8, 32, 32, 3), dtype=np.uint8)
    >>> save_video(frames, "clip.gif", fps=8, scale=4)  # doctest: +SKIP
    >>> read_video("clip.gif", max_frames=9).shape  # doctest: +SKIP
    (8, 128, 128, 3)
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageSequence, UnidentifiedImageError

from mmspec.core.bounds import MAX_VIDEO_BYTES, check_image_pixels, check_media_file, check_video_size
from mmspec.io.images import commit_heatmap, open_checked

VIDEO_FORMATS = {"gif": "Pillow", "mp4": "PyAV"}
# frame rates a saved pipeline or a call may ask for
MAX_FPS = 120


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


def check_fps(fps) -> int:
    """Frames per second, a whole number from 1 to `MAX_FPS` (-5.5 is no rate to round)."""
    if isinstance(fps, bool) or not isinstance(fps, int) or not 1 <= fps <= MAX_FPS:
        raise ValueError(f"fps must be a whole number from 1 to {MAX_FPS}, got {fps!r}")
    return fps


def save_video(frames: np.ndarray, path: str | Path, fps: int = 8, scale: int = 1, fmt: str | None = None) -> Path:
    """Writes uint8 `frames [F, H, W, 3]` to `path` as `fmt` (by default its suffix: .gif or
    .mp4), each pixel `scale` times larger (nearest neighbour: 32x32 frames are tiny). The
    upscaled frames are held at once: past `MAX_FRAME_SIDE` a side or `MAX_VIDEO_BYTES`
    (`mmspec.core.bounds`) they are refused before any is made (`scale=10**6` reached 7 GB)."""
    fmt = video_format(path) if fmt is None else check_format(fmt)
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise ValueError(f"scale must be an integer >= 1, got {scale!r}")
    check_fps(fps)
    frames = np.asarray(frames, dtype=np.uint8)
    if frames.ndim != 4 or frames.shape[-1] != 3 or 0 in frames.shape:
        raise ValueError(f"frames must be a uint8 array [F, H, W, 3] of at least one frame, got shape {frames.shape}")
    check_video_size(*frames.shape[:3], scale)
    frames = upscale(frames, scale)
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


def read_video(path: str | Path, max_frames: int) -> np.ndarray:
    """The first `max_frames` frames (or all, when fewer) of the video in `path` as uint8
    `[F, H, W, 3]`: a .gif through Pillow, a folder of .png frames in name order, any other
    file through PyAV (.mp4, .mov, .webm, ...). Frames past `max_frames` are never decoded,
    so a long video costs what its first frames do. A missing or unreadable video, one
    without frames, or frames of different sizes are a one-line ValueError naming it."""
    if isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 1:
        raise ValueError(f"max_frames must be an integer >= 1, got {max_frames!r}")
    path = Path(path)
    if path.is_dir():
        frames = _read_png_folder(path, max_frames)
    elif not path.is_file():
        raise ValueError(f"video {str(path)!r} does not exist")
    elif path.suffix.lower() == ".gif":
        check_media_file(path, "video", MAX_VIDEO_BYTES)
        frames = _read_gif(path, max_frames)
    else:
        check_media_file(path, "video", MAX_VIDEO_BYTES)
        frames = _read_with_av(path, max_frames)
    if not frames:
        raise ValueError(f"video {str(path)!r} holds no frames")
    odd = next((i for i, f in enumerate(frames) if f.shape != frames[0].shape), None)
    if odd is not None:
        raise ValueError(f"video {str(path)!r}: frame {odd} is {frames[odd].shape[1]}x{frames[odd].shape[0]} pixels, "
                         f"its first {frames[0].shape[1]}x{frames[0].shape[0]}")
    return np.stack(frames)


def _read_png_folder(folder: Path, max_frames: int) -> list[np.ndarray]:
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".png" and not p.name.startswith("."))
    if not files:
        raise ValueError(f"folder {str(folder)!r} holds no .png frames")
    frames, held = [], 0
    for file in files[:max_frames]:
        with open_checked(file, "frame") as im:
            held = _hold(held, im.width * im.height * 3, folder)
            try:
                frames.append(np.asarray(im.convert("RGB")))
            except OSError as err:
                raise ValueError(f"cannot read frame {str(file)!r}: {err}") from None
    return frames


def _hold(held: int, frame_bytes: int, path: Path) -> int:
    """`held` + `frame_bytes`, refused past `MAX_VIDEO_BYTES`: the frames read are held at once."""
    if held + frame_bytes > MAX_VIDEO_BYTES:
        raise ValueError(f"video {str(path)!r}: its frames pass the {MAX_VIDEO_BYTES // 2**30} GiB mmspec holds; "
                         "read fewer frames (max_frames) or give a smaller video")
    return held + frame_bytes


def _read_gif(path: Path, max_frames: int) -> list[np.ndarray]:
    frames, held = [], 0
    with open_checked(path, "video") as im:
        try:
            for frame, _ in zip(ImageSequence.Iterator(im), range(max_frames)):
                held = _hold(held, im.width * im.height * 3, path)
                frames.append(np.asarray(frame.convert("RGB")))
        except (OSError, UnidentifiedImageError) as err:
            raise ValueError(f"cannot read video {str(path)!r}: {err}") from None
    return frames


def _read_with_av(path: Path, max_frames: int) -> list[np.ndarray]:
    if importlib.util.find_spec("av") is None:
        raise ValueError(f"reading {path.suffix or 'this'} video needs PyAV, which is not installed: pip install av "
                         "(or mmspec[video]), or give a .gif or a folder of .png frames")
    import av

    frames, held = [], 0
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise ValueError(f"video {str(path)!r} holds no video stream")
            for frame in container.decode(container.streams.video[0]):
                check_image_pixels(frame.width, frame.height, f"frame {len(frames)} of {str(path)!r}")
                held = _hold(held, frame.width * frame.height * 3, path)
                frames.append(frame.to_ndarray(format="rgb24"))
                if len(frames) == max_frames:
                    break
    except (OSError, av.FFmpegError) as err:
        raise ValueError(f"cannot read video {str(path)!r}: {err}") from None
    return frames


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
