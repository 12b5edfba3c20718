import numpy as np
import pytest
import trimesh

from mmspec.datasets.meshes import CLASS_NAMES, NUM_CLASSES, load_split
from mmspec.tokenizers.mesh import BOS, EOS, PAD, STEP, TOKENS_PER_FACE, MalformedMeshSequence, mesh_to_tokens, tokens_to_mesh

MESHES, LABELS = load_split("heldout", 3 * NUM_CLASSES)


@pytest.mark.parametrize("label", range(NUM_CLASSES), ids=CLASS_NAMES)
def test_round_trip_keeps_every_face_and_vertices_within_one_step(label):
    for mesh in [m for m, y in zip(MESHES, LABELS) if y == label]:
        tokens = mesh_to_tokens(mesh)
        assert tokens[0] == BOS and tokens[-1] == EOS and (len(tokens) - 2) % TOKENS_PER_FACE == 0
        back = tokens_to_mesh(tokens)
        assert len(back.faces) == len(mesh.faces) and len(back.vertices) == len(mesh.vertices)
        # every original vertex has a decoded one within one quantisation step on every axis
        gap = np.abs(mesh.vertices[:, None] - back.vertices[None]).max(-1).min(1)
        assert gap.max() <= STEP
        # every face comes back: the same corners (by their nearest decoded vertex), same winding
        nearest = np.abs(mesh.vertices[:, None] - back.vertices[None]).max(-1).argmin(1)
        turn = lambda f: tuple(np.roll(f, -int(np.argmin(f))))
        assert {turn(nearest[f]) for f in mesh.faces} == {turn(f) for f in back.faces}
        assert back.is_watertight and mesh_to_tokens(back, normalise=False) == tokens


def test_sequence_order_is_meshxl_order():
    coords = np.array(mesh_to_tokens(trimesh.creation.box())[1:-1]).reshape(-1, 3, 3)  # faces x vertices x (z, y, x)
    keys = [tuple(v) for v in coords[:, 0]]
    assert keys == sorted(keys)  # faces by their lowest vertex, vertices sorted z, y, x
    assert all(tuple(f[0]) <= tuple(v) for f in coords for v in f)


def test_duplicate_vertices_merge_and_degenerate_faces_drop():
    mesh = trimesh.Trimesh(vertices=[[0, 0, 0], [1, 0, 0], [0, 1, 0], [1e-4, 0, 0]], faces=[[0, 1, 2], [0, 3, 1]], process=False)
    back = tokens_to_mesh(mesh_to_tokens(mesh))
    assert len(back.faces) == 1 and len(back.vertices) == 3


@pytest.mark.parametrize("tail, problem", [([5, 6], "not a multiple of 9"), ([200] + [1] * 8, "not a coordinate level"),
                                            ([BOS] + [1] * 8, "not a coordinate level")])
def test_malformed_sequences_keep_the_whole_faces_before_the_fault(tail, problem):
    tokens = mesh_to_tokens(trimesh.creation.box(), eos=False)
    with pytest.warns(UserWarning, match=problem):
        mesh = tokens_to_mesh(tokens + tail + [EOS])
    assert len(mesh.faces) == 12
    with pytest.raises(MalformedMeshSequence, match=problem):
        tokens_to_mesh(tokens + tail, strict=True)


def test_everything_after_eos_or_pad_is_ignored():
    tokens = mesh_to_tokens(trimesh.creation.box())
    assert len(tokens_to_mesh(tokens + [3, 4, PAD]).faces) == 12
    assert len(tokens_to_mesh(tokens[:-1] + [PAD, 1, 2]).faces) == 12


def test_a_mesh_without_faces_is_refused():
    with pytest.raises(ValueError, match="at least one face"):
        mesh_to_tokens(trimesh.Trimesh())
