"""OBJ text, as LLaMA-Mesh-style language models write meshes: `v x y z` and `f a b c` lines.

`parse_obj` keeps every line it understands and reports the others (a vertex with two
coordinates, a face naming a vertex that does not exist, text the model wrote between
them), so a mesh that is mostly right still comes back. `mesh_to_obj_text` writes a mesh
the way LLaMA-Mesh reads it: integer coordinates in 64 bins per axis, 1-based faces.

Example:
    >>> mesh, problems = parse_obj("v 0 0 0\\nv 1 0 0\\nv 0 1 0\\nf 1 2 3\\nf 1 2 9\\n")
    >>> len(mesh.faces), problems
    (1, ["line 5: face 'f 1 2 9' names vertex 9 of 3"])
"""

from __future__ import annotations

import numpy as np
import trimesh

from mmspec.tokenizers.mesh import normalize

OBJ_LEVELS = 64  # LLaMA-Mesh's bins per axis
SKIPPED = ("#", "vn", "vt", "o", "g", "s", "usemtl", "mtllib")  # OBJ lines a mesh does not need


def parse_obj(text: str) -> tuple[trimesh.Trimesh, list[str]]:
    """The mesh of the `v` and `f` lines of `text` (polygons fanned into triangles,
    degenerate faces dropped), and one message per line that could not be used."""
    vertices, faces, pending, problems = [], [], [], []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.split()[0] in SKIPPED:
            continue
        head, *fields = line.split()
        if head == "v":
            try:
                coords = [float(x) for x in fields]
            except ValueError:
                coords = []
            if len(coords) < 3 or not np.isfinite(coords[:3]).all():
                problems.append(f"line {n}: vertex {line!r} needs three finite coordinates")
                continue
            vertices.append(coords[:3])
        elif head == "f":
            try:
                corners = [int(f.split("/")[0]) for f in fields]
            except ValueError:
                problems.append(f"line {n}: face {line!r} needs integer vertex indices")
                continue
            if len(corners) < 3:
                problems.append(f"line {n}: face {line!r} needs at least three vertices")
                continue
            pending.append((n, line, corners, len(vertices)))
        else:
            problems.append(f"line {n}: not a v or f line: {line[:40]!r}")
    for n, line, corners, seen in pending:  # negative indices count back from the vertices before the face
        index = [c - 1 if c > 0 else seen + c for c in corners]
        bad = next((c for c, i in zip(corners, index) if not 0 <= i < len(vertices)), None)
        if bad is not None:
            problems.append(f"line {n}: face {line!r} names vertex {bad} of {len(vertices)}")
            continue
        faces += [[index[0], index[k], index[k + 1]] for k in range(1, len(index) - 1)]
    faces = np.array(faces, dtype=np.int64).reshape(-1, 3)
    keep = (faces[:, 0] != faces[:, 1]) & (faces[:, 1] != faces[:, 2]) & (faces[:, 0] != faces[:, 2])
    mesh = trimesh.Trimesh(vertices=np.array(vertices, dtype=np.float64).reshape(-1, 3), faces=faces[keep], process=False)
    return mesh, problems


def mesh_to_obj_text(mesh: trimesh.Trimesh, levels: int = OBJ_LEVELS) -> str:
    """`mesh` as LLaMA-Mesh writes meshes: normalised, integer coordinates 0..levels-1."""
    q = np.clip(np.round((normalize(mesh.vertices) + 1) / 2 * (levels - 1)), 0, levels - 1).astype(int)
    lines = [f"v {x} {y} {z}" for x, y, z in q] + [f"f {a + 1} {b + 1} {c + 1}" for a, b, c in mesh.faces]
    return "\n".join(lines) + "\n"
