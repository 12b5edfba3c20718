"""MeshXL's sequence format: triangle meshes <-> 131 token ids, both ways.

A mesh is normalised into the cube [-1, 1]^3 (centred on its bounding box, longest side
scaled to 2) and every coordinate quantised to 128 levels, `round((t + 1) / 2 * 128 - 0.5)`
(MeshXL's and MeshGPT's `discretize`). Vertices that quantise to the same point are merged
and faces that lose a corner (degenerate) or repeat another face are dropped. Vertices are
sorted by (z, y, x), each face is turned (keeping its winding) to start at its lowest
vertex and faces are sorted by their vertex indices, so a face comes after every face with
a lower first vertex: neighbouring faces sit close together and repeat coordinates.

A sequence is `<bos> (z y x) (z y x) (z y x) ... <eos>`: 9 coordinate tokens per face.
Ids 0..127 are coordinate levels, 128 begin, 129 end, 130 padding.

Example:
    >>> import trimesh
    >>> tokens = mesh_to_tokens(trimesh.creation.box())
    >>> len(tokens), tokens[0], tokens[-1]
    (110, 128, 129)
    >>> mesh = tokens_to_mesh(tokens)
    >>> len(mesh.faces), len(mesh.vertices)
    (12, 8)
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
import trimesh

LEVELS = 128
BOS, EOS, PAD = 128, 129, 130
VOCAB_SIZE = 131
TOKENS_PER_FACE = 9
STEP = 2.0 / LEVELS  # width of one quantisation level in the [-1, 1] cube


class MalformedMeshSequence(ValueError):
    """A token sequence that is not a whole MeshXL mesh (raised only with `strict=True`)."""


def normalize(vertices: np.ndarray) -> np.ndarray:
    """Centres the bounding box on the origin and scales its longest side to 2."""
    vertices = np.asarray(vertices, dtype=np.float64)
    lo, hi = vertices.min(0), vertices.max(0)
    scale = float((hi - lo).max()) / 2
    if scale <= 0:
        raise ValueError("cannot normalise a mesh whose vertices all coincide")
    return (vertices - (lo + hi) / 2) / scale


def quantize(coords: np.ndarray) -> np.ndarray:
    """Coordinates in [-1, 1] -> integer levels 0..127."""
    levels = np.round((np.asarray(coords, dtype=np.float64) + 1) / 2 * LEVELS - 0.5)
    return np.clip(levels, 0, LEVELS - 1).astype(np.int64)


def dequantize(levels: np.ndarray) -> np.ndarray:
    """Levels 0..127 -> the centres of their cells in [-1, 1]."""
    return (np.asarray(levels, dtype=np.float64) + 0.5) / LEVELS * 2 - 1


def canonical_faces(levels: np.ndarray, faces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merges equal quantised vertices, drops degenerate and repeated faces, and orders
    vertices and faces as MeshXL does. Returns (vertex levels `[N, 3]`, faces `[F, 3]`)."""
    levels = np.asarray(levels, dtype=np.int64).reshape(-1, 3)
    faces = np.asarray(faces, dtype=np.int64).reshape(-1, 3)
    unique, inverse = np.unique(levels, axis=0, return_inverse=True)
    order = np.lexsort((unique[:, 0], unique[:, 1], unique[:, 2]))  # z first, then y, then x
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    faces = rank[inverse.reshape(-1)[faces]]
    keep = (faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2])
    faces = faces[keep]
    turn = faces.argmin(1)
    faces = np.stack([faces[np.arange(len(faces)), (turn + k) % 3] for k in range(3)], 1)
    if len(faces):
        faces = np.unique(faces, axis=0)  # sorted rows, repeats gone
    used = np.unique(faces)
    remap = np.full(len(unique), -1)
    remap[used] = np.arange(len(used))
    return unique[order][used], remap[faces] if len(faces) else faces.reshape(0, 3)


def mesh_to_tokens(mesh: trimesh.Trimesh, *, normalise: bool = True, bos: bool = True, eos: bool = True) -> list[int]:
    """A mesh -> MeshXL token ids (`normalise=False` for vertices already in [-1, 1])."""
    if not isinstance(mesh, trimesh.Trimesh) or len(mesh.faces) == 0:
        raise ValueError("mesh_to_tokens takes a trimesh.Trimesh with at least one face")
    vertices = normalize(mesh.vertices) if normalise else np.asarray(mesh.vertices)
    levels, faces = canonical_faces(quantize(vertices), mesh.faces)
    coords = levels[:, ::-1][faces].reshape(-1)  # (z, y, x) per vertex
    return [BOS] * bos + coords.tolist() + [EOS] * eos


def tokens_to_mesh(tokens, *, strict: bool = False) -> trimesh.Trimesh:
    """MeshXL token ids -> a mesh with merged vertices and no degenerate faces.

    A leading `<bos>` is skipped and everything from the first `<eos>` or `<pad>` on is
    ignored. A malformed sequence (an id outside 0..130, `<bos>` after the start, or a
    length that is not a multiple of 9) gives the mesh of the whole faces before the fault
    and a warning; with `strict=True` it raises `MalformedMeshSequence` instead.
    """
    ids = torch.as_tensor(tokens).reshape(-1).tolist() if not isinstance(tokens, list) else list(tokens)
    if ids and ids[0] == BOS:
        ids = ids[1:]
    end = next((i for i, t in enumerate(ids) if t in (EOS, PAD)), len(ids))
    ids = ids[:end]
    bad = next((i for i, t in enumerate(ids) if not (isinstance(t, (int, np.integer)) and 0 <= t < LEVELS)), None)
    problem = None
    if bad is not None:
        problem = f"token {bad} is {ids[bad]!r}, not a coordinate level 0..{LEVELS - 1}"
        ids = ids[:bad]
    if len(ids) % TOKENS_PER_FACE:
        problem = problem or f"{len(ids)} coordinate tokens is not a multiple of {TOKENS_PER_FACE}"
        ids = ids[: len(ids) - len(ids) % TOKENS_PER_FACE]
    if problem is not None:
        if strict:
            raise MalformedMeshSequence(f"malformed mesh sequence: {problem}")
        warnings.warn(f"malformed mesh sequence: {problem}; kept the {len(ids) // TOKENS_PER_FACE} whole faces before it", stacklevel=2)
    corners = np.asarray(ids, dtype=np.int64).reshape(-1, 3)[:, ::-1]  # back to (x, y, z)
    levels, faces = canonical_faces(corners, np.arange(len(corners)).reshape(-1, 3))
    return trimesh.Trimesh(vertices=dequantize(levels), faces=faces, process=False)
