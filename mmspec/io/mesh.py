"""Meshes out: files through trimesh, a PNG preview rasterised on the CPU, and validity.

The preview is a small z-buffer rasteriser of our own (numpy, no OpenGL): an orthographic
view from above a front corner, faces flat-shaded by a fixed light, edges darkened, so a
low-poly mesh reads at a glance.

Example:
    >>> import trimesh
    >>> render_preview(trimesh.creation.box(), size=64).size
    (64, 64)
    >>> is_valid(trimesh.creation.box())
    True
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import trimesh
from PIL import Image

from mmspec.io.files import atomic_write
from mmspec.io.images import image_grid, label_rows

MESH_FORMATS = (".obj", ".glb", ".ply")
LIGHT = np.array([0.4, 0.5, 0.75]) / np.linalg.norm([0.4, 0.5, 0.75])
FACE_COLOUR = np.array([120, 170, 230], dtype=np.float64)
EDGE_COLOUR = np.array([30, 40, 60], dtype=np.float64)
BACKGROUND = 255


def is_valid(mesh: trimesh.Trimesh) -> bool:
    """A mesh with faces, watertight, and no face of zero area."""
    return len(mesh.faces) > 0 and bool(mesh.is_watertight) and bool((mesh.area_faces > 1e-12).all())


def save_mesh(mesh: trimesh.Trimesh, path: str | Path) -> Path:
    """Writes `mesh` as .obj, .glb or .ply (by the suffix), atomically; a one-line
    ValueError for another suffix or a folder that cannot be written."""
    path = Path(path)
    if path.suffix.lower() not in MESH_FORMATS:
        raise ValueError(f"cannot write {path}: mesh files end in {', '.join(MESH_FORMATS)}")
    data = mesh.export(file_type=path.suffix.lower()[1:])
    data = data.encode() if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: tmp.write_bytes(data))
    except OSError as err:
        raise ValueError(f"cannot write {path}: {err.strerror or err}") from None
    return path


def view_rotation(azimuth: float = 35.0, elevation: float = 25.0) -> np.ndarray:
    """World -> camera rotation: y up, looking down -z after turning `azimuth` degrees
    about y and tilting `elevation` degrees down."""
    a, e = np.radians(azimuth), np.radians(elevation)
    turn = np.array([[np.cos(a), 0, -np.sin(a)], [0, 1, 0], [np.sin(a), 0, np.cos(a)]])
    tilt = np.array([[1, 0, 0], [0, np.cos(e), -np.sin(e)], [0, np.sin(e), np.cos(e)]])
    return tilt @ turn


def render_preview(mesh: trimesh.Trimesh, size: int = 192, azimuth: float = 35.0, elevation: float = 25.0) -> Image.Image:
    """A `size` x `size` RGB picture of `mesh` (z up in the world, as trimesh's primitives)."""
    image = np.full((size, size, 3), BACKGROUND, dtype=np.float64)
    if len(mesh.faces) == 0:
        return Image.fromarray(image.astype(np.uint8))
    zup_to_yup = np.array([[1, 0, 0], [0, 0, 1], [0, -1, 0]])
    vertices = np.asarray(mesh.vertices, dtype=np.float64)
    centre = (vertices.min(0) + vertices.max(0)) / 2
    cam = (vertices - centre) @ (view_rotation(azimuth, elevation) @ zup_to_yup).T
    scale = 0.45 * size / max(np.abs(cam[:, :2]).max(), 1e-9)
    px = np.stack([size / 2 + cam[:, 0] * scale, size / 2 - cam[:, 1] * scale], 1)
    depth = np.full((size, size), -np.inf)
    normals = np.cross(cam[mesh.faces[:, 1]] - cam[mesh.faces[:, 0]], cam[mesh.faces[:, 2]] - cam[mesh.faces[:, 0]])
    lengths = np.linalg.norm(normals, axis=1, keepdims=True)
    normals = normals / np.where(lengths > 0, lengths, 1)
    light = LIGHT
    for face, normal in zip(mesh.faces, normals):
        (x0, y0), (x1, y1), (x2, y2) = px[face]
        area = (x1 - x0) * (y2 - y0) - (x2 - x0) * (y1 - y0)
        if abs(area) < 1e-9:
            continue
        lo_x, hi_x = int(max(np.floor(min(x0, x1, x2)), 0)), int(min(np.ceil(max(x0, x1, x2)), size - 1))
        lo_y, hi_y = int(max(np.floor(min(y0, y1, y2)), 0)), int(min(np.ceil(max(y0, y1, y2)), size - 1))
        if lo_x > hi_x or lo_y > hi_y:
            continue
        ys, xs = np.mgrid[lo_y : hi_y + 1, lo_x : hi_x + 1] + 0.5
        w0 = ((x1 - xs) * (y2 - ys) - (x2 - xs) * (y1 - ys)) / area
        w1 = ((x2 - xs) * (y0 - ys) - (x0 - xs) * (y2 - ys)) / area
        w2 = 1 - w0 - w1
        inside = (w0 >= 0) & (w1 >= 0) & (w2 >= 0)
        z = w0 * cam[face[0], 2] + w1 * cam[face[1], 2] + w2 * cam[face[2], 2]
        region = depth[lo_y : hi_y + 1, lo_x : hi_x + 1]
        front = inside & (z > region)
        region[front] = z[front]
        shade = 0.35 + 0.65 * abs(float(normal @ light))  # both sides lit: open or flipped faces still show
        # distance to the nearest edge in pixels: barycentric weight x twice the height
        edge_px = np.minimum.reduce([w0 * abs(area) / max(np.hypot(x2 - x1, y2 - y1), 1e-9),
                                     w1 * abs(area) / max(np.hypot(x0 - x2, y0 - y2), 1e-9),
                                     w2 * abs(area) / max(np.hypot(x1 - x0, y1 - y0), 1e-9)])
        colour = np.where((edge_px < 0.9)[..., None], EDGE_COLOUR, FACE_COLOUR * shade)
        image[lo_y : hi_y + 1, lo_x : hi_x + 1][front] = colour[front]
    return Image.fromarray(image.clip(0, 255).astype(np.uint8))


def save_preview(mesh: trimesh.Trimesh, path: str | Path, size: int = 192) -> Path:
    """Writes `render_preview(mesh)` as a PNG, atomically, with a one-line error when the
    path cannot be written."""
    path = Path(path)
    image = render_preview(mesh, size)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: image.save(tmp, format="PNG"))
    except OSError as err:
        raise ValueError(f"cannot write {path}: {err.strerror or err}") from None
    return path


def preview_grid(rows: list[list[trimesh.Trimesh]], labels: list[str] | None = None, size: int = 128) -> Image.Image:
    """Previews of `rows` of meshes tiled row by row, each row named by `labels`."""
    cols = max(len(r) for r in rows)
    blank = Image.new("RGB", (size, size), "white")
    tiles = [render_preview(m, size) for r in rows for m in r] if all(len(r) == cols for r in rows) else \
        [render_preview(r[i], size) if i < len(r) else blank for r in rows for i in range(cols)]
    grid = image_grid(tiles, cols)
    return label_rows(grid, labels) if labels else grid
