"""Meshes: a procedural, class-labelled low-poly mesh dataset built with `trimesh.creation`.

Eight classes (`CLASS_NAMES`), each a closed (watertight) mesh of 8 to 48 triangles with
random proportions and section counts, its main axis along x, y or z, normalised into the
[-1, 1] cube. Section counts keep look-alike classes apart: a prism has 3 sides and a
cylinder 7 to 9, a pyramid 4 and a cone 7 to 9. Orientations are axis-aligned so that a
model small enough to train on one CPU thread learns whole shapes rather than rotations.

Mesh i of a split is drawn from `numpy.random.default_rng(SPLIT_SEEDS[split] + i)` with
label `i % 8`, so the first n meshes of a split do not depend on how many are asked for.

Example:
    >>> meshes, labels = load_split("heldout", 8)
    >>> labels
    [0, 1, 2, 3, 4, 5, 6, 7]
    >>> all(m.is_watertight for m in meshes)
    True
"""

from __future__ import annotations

import numpy as np
import trimesh
from trimesh import creation

from mmspec.tokenizers.mesh import normalize

CLASS_NAMES = ("box", "prism", "cylinder", "cone", "pyramid", "icosphere", "capsule", "torus")
NUM_CLASSES = len(CLASS_NAMES)
SPLIT_SEEDS = {"train": 0, "heldout": 10_000_000}
MAX_FACES = 48


def _shape(name: str, rng: np.random.Generator) -> trimesh.Trimesh:
    """One mesh of class `name` along z, before orientation and normalisation."""
    u = lambda lo, hi: float(rng.uniform(lo, hi))
    if name == "box":
        return creation.box(extents=[u(0.4, 1.0), u(0.4, 1.0), u(0.4, 1.0)])
    if name == "prism":
        return creation.cylinder(radius=u(0.3, 0.6), height=u(0.4, 1.2), sections=3)
    if name == "cylinder":
        return creation.cylinder(radius=u(0.3, 0.6), height=u(0.4, 1.2), sections=int(rng.integers(7, 10)))
    if name == "cone":
        return creation.cone(radius=u(0.3, 0.6), height=u(0.5, 1.2), sections=int(rng.integers(7, 10)))
    if name == "pyramid":
        return creation.cone(radius=u(0.4, 0.7), height=u(0.4, 1.0), sections=4)
    if name == "icosphere":
        mesh = creation.icosphere(subdivisions=0)
        mesh.apply_scale([u(0.7, 1.0), u(0.7, 1.0), u(0.7, 1.0)])
        return mesh
    if name == "capsule":
        return creation.capsule(height=u(0.4, 1.2), radius=u(0.25, 0.45), count=[4, 3])
    if name == "torus":
        return creation.torus(major_radius=1.0, minor_radius=u(0.25, 0.45),
                              major_sections=int(rng.integers(5, 7)), minor_sections=int(rng.integers(3, 5)))
    raise ValueError(f"unknown mesh class {name!r}; choose from {', '.join(CLASS_NAMES)}")


def sample_mesh(label: int, rng: np.random.Generator) -> trimesh.Trimesh:
    """A random mesh of class `label`, main axis along x, y or z, in the [-1, 1] cube."""
    mesh = _shape(CLASS_NAMES[label], rng)
    axis = int(rng.integers(3))
    if axis != 2:  # turn z onto x or y
        mesh.apply_transform(trimesh.transformations.rotation_matrix(np.pi / 2, [0, 1, 0] if axis == 0 else [1, 0, 0]))
    return trimesh.Trimesh(vertices=normalize(mesh.vertices), faces=mesh.faces, process=False)


def load_split(split: str, n: int) -> tuple[list[trimesh.Trimesh], list[int]]:
    """The first `n` meshes of "train" or "heldout" and their labels (`i % 8`)."""
    if split not in SPLIT_SEEDS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLIT_SEEDS)}")
    labels = [i % NUM_CLASSES for i in range(n)]
    meshes = [sample_mesh(label, np.random.default_rng(SPLIT_SEEDS[split] + i)) for i, label in enumerate(labels)]
    return meshes, labels
