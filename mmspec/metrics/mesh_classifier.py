"""A small point-cloud classifier of the Meshes dataset: the judge of generated meshes.

A PointNet (a shared per-point MLP, max-pooled, then a two-layer head) on points sampled
uniformly from a mesh's surface, rescaled into the [-1, 1] cube. It is trained by
`scripts/train_mesh_model.py` and ships in `mmspec/assets/mesh/classifier/`.

Example:
    >>> import torch, trimesh
    >>> clf = MeshClassifier(MeshClassifierConfig(num_classes=8)).eval()
    >>> points = sample_points(trimesh.creation.box(), 256, torch.Generator().manual_seed(0))
    >>> points.shape, clf.predict(points[None]).shape
    (torch.Size([256, 3]), torch.Size([1]))
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import trimesh
from torch import nn

from mmspec.utils.checkpoint import DeviceDtypeMixin, FromCheckpoint, JSONConfig


@dataclass
class MeshClassifierConfig(JSONConfig):
    """Class count, points per mesh, and the widths of the per-point MLP and of the head."""

    config_name = "mesh classifier config"

    num_classes: int = 8
    num_points: int = 256
    point_widths: list[int] = field(default_factory=lambda: [64, 128, 256])
    head_width: int = 128


def sample_points(mesh: trimesh.Trimesh, n: int, generator: torch.Generator) -> torch.Tensor:
    """`[n, 3]` points uniform on the surface of `mesh` (faces by area), rescaled so the
    bounding box is centred and its longest side is 2. Every draw comes from `generator`."""
    triangles = torch.tensor(np.asarray(mesh.triangles), dtype=torch.float32)  # [F, 3, 3], a copy
    if len(triangles) == 0:
        return torch.zeros(n, 3)
    area = torch.linalg.cross(triangles[:, 1] - triangles[:, 0], triangles[:, 2] - triangles[:, 0]).norm(dim=-1)
    weights = area if float(area.sum()) > 0 else torch.ones_like(area)
    face = torch.multinomial(weights, n, replacement=True, generator=generator)
    u, v = torch.rand(2, n, 1, generator=generator)
    flip = (u + v) > 1
    u, v = torch.where(flip, 1 - u, u), torch.where(flip, 1 - v, v)
    t = triangles[face]
    points = t[:, 0] + u * (t[:, 1] - t[:, 0]) + v * (t[:, 2] - t[:, 0])
    lo, hi = points.amin(0), points.amax(0)
    return (points - (lo + hi) / 2) / ((hi - lo).max() / 2).clamp(min=1e-6)


class MeshClassifier(FromCheckpoint, DeviceDtypeMixin, nn.Module):
    """PointNet over `[B, N, 3]` points: logits `[B, num_classes]`."""

    checkpoint_name = "mesh classifier checkpoint"

    def __init__(self, config: MeshClassifierConfig):
        super().__init__()
        self.config = config
        layers, cin = [], 3
        for w in config.point_widths:
            layers += [nn.Linear(cin, w), nn.GELU()]
            cin = w
        self.points = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Linear(cin, config.head_width), nn.GELU(), nn.Linear(config.head_width, config.num_classes))

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        if points.dim() != 3 or points.shape[-1] != 3:
            raise ValueError(f"points must be [B, N, 3], got {tuple(points.shape)}")
        return self.head(self.points(points.to(self.head[0].weight)).amax(1))

    @torch.no_grad()
    def predict(self, points: torch.Tensor) -> torch.Tensor:
        """Predicted classes `[B]` (long)."""
        return self(points).argmax(-1)

    @torch.no_grad()
    def classify(self, meshes: list[trimesh.Trimesh], generator: torch.Generator) -> torch.Tensor:
        """Predicted classes `[len(meshes)]` of whole meshes (points drawn from `generator`)."""
        points = torch.stack([sample_points(m, self.config.num_points, generator) for m in meshes])
        return self.predict(points)
