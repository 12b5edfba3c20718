import pytest

pytest.importorskip("gradio", reason="the demo needs the [demo] extra")
import gradio as gr  # noqa: E402
import torch  # noqa: E402
import trimesh  # noqa: E402
from transformers import OPTForCausalLM  # noqa: E402

from mmspec.apps.demo import TABS  # noqa: E402
from mmspec.apps.mesh_tab import build_mesh_tab, compare_meshes  # noqa: E402
from mmspec.models.adapters.mesh_opt import mesh_opt_config  # noqa: E402
from mmspec.pipelines.mesh import MeshPipeline  # noqa: E402


@pytest.fixture(scope="module")
def pipe():
    torch.manual_seed(0)
    model = OPTForCausalLM(mesh_opt_config(2, hidden=32, layers=1, heads=2)).eval()
    return MeshPipeline(model, class_names=["box", "cone"], max_faces=3)


def test_the_meshes_tab_is_registered_and_builds(pipe):
    assert ("Meshes", "mmspec.apps.mesh_tab", "build_mesh_tab") in [tab[:3] for tab in TABS]
    with gr.Blocks() as demo:
        with gr.Tab("Meshes"):
            build_mesh_tab(pipe)
    names = {getattr(block, "elem_id", None) for block in demo.blocks.values()}
    assert {"mesh-ar", "mesh-fast", "mesh-stats"} <= names


def test_ar_and_the_method_come_back_as_glb_files_with_their_cost(pipe, tmp_path):
    paths, rows, _ = compare_meshes(pipe, "cone", "mc-sjd+lookup", seed=1, temperature=1.0, out_dir=tmp_path)
    assert [r[0] for r in rows] == ["ar", "mc-sjd+lookup"] and rows[0][-3:] == [1.0, 1.0, "yes"]
    _, rows, same = compare_meshes(pipe, "cone", "auto", seed=1, temperature=1.0, out_dir=tmp_path)
    assert rows[1][-1] == "yes" and same == "**Token-identical to AR:** `auto`."  # the same mesh as AR's, token for token
    assert all(isinstance(trimesh.load(p, force="mesh"), trimesh.Trimesh) for p in paths)
    with pytest.raises(ValueError, match="unknown mesh class"):
        compare_meshes(pipe, "sphere", "mc-sjd", seed=0, temperature=1.0, out_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown mesh decoding"):
        compare_meshes(pipe, "box", "zipar", seed=0, temperature=1.0, out_dir=tmp_path)
