import json

import pytest
import torch
from transformers import OPTForCausalLM

from mmspec.commands.cli import main
from mmspec.models.adapters.mesh_opt import mesh_opt_config
from mmspec.pipelines.mesh import MeshPipeline


@pytest.fixture(scope="module")
def mesh_dir(tmp_path_factory):
    torch.manual_seed(0)
    model = OPTForCausalLM(mesh_opt_config(3, hidden=32, layers=1, heads=2)).eval()
    folder = tmp_path_factory.mktemp("mesh_pipeline")
    MeshPipeline(model, class_names=["box", "cone", "torus"]).save_pretrained(folder)
    return folder


def test_mesh_writes_files_previews_and_records_and_a_rerun_resumes(mesh_dir, tmp_path, capsys):
    args = ["mesh", "--pipeline", str(mesh_dir), "--classes", "box", "2", "--max-faces", "2", "--format", "glb", "obj",
            "--out-dir", str(tmp_path)]
    assert main(args) == 0
    for name in ("box_0", "torus_0"):
        assert all((tmp_path / "meshes" / f"{name}.{ext}").is_file() for ext in ("glb", "obj", "png"))
    records = [json.loads(line) for line in (tmp_path / "manifest.jsonl").read_text().splitlines()]
    assert [r["class"] for r in records] == ["box", "torus"] and all(r["forwards"] >= 1 for r in records)
    assert [r["seed"] for r in records] == [0, 1]
    assert (tmp_path / "grid.png").is_file()
    recorded = json.loads((tmp_path / "run.json").read_text())
    assert (recorded["device"], recorded["settings"]["dtype"]) == ("cpu", "float32")  # --device auto on a CPU machine
    capsys.readouterr()
    assert main(args) == 0
    assert capsys.readouterr().out.count("skipped") == 2


def test_mesh_batch_file_names_its_items(mesh_dir, tmp_path):
    items = tmp_path / "jobs.jsonl"
    items.write_text('{"class": "cone", "id": "a"}\n{"class": 0}\n')
    assert main(["mesh", "--pipeline", str(mesh_dir), "--items", str(items), "--max-faces", "2", "--out-dir", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o/meshes/a.glb").is_file() and (tmp_path / "o/meshes/00001.glb").is_file()


@pytest.mark.parametrize("extra, message", [
    (["--classes", "sphere"], "unknown mesh class 'sphere'; choose from box, cone, torus"),
    (["--decoding", "zipar"], "unknown mesh decoding"),
    (["--decoding", "mc-sjd+above"], "unknown mesh decoding"),
    (["--temperature", "99"], "temperature must be at most"),
])
def test_mesh_bad_input_is_a_one_line_error(mesh_dir, tmp_path, capsys, extra, message):
    assert main(["mesh", "--pipeline", str(mesh_dir), "--out-dir", str(tmp_path), *extra]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mmspec mesh: error:")]
    assert len(errors) == 1 and message in errors[0]


def test_mesh_unwritable_output_and_corrupt_folder_are_one_line_errors(mesh_dir, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["mesh", "--pipeline", str(mesh_dir), "--out-dir", str(blocker / "out")]) == 2
    assert "is not writable" in capsys.readouterr().err
    assert main(["mesh", "--pipeline", str(tmp_path), "--out-dir", str(tmp_path / "o")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("mmspec mesh: error:")]
    assert len(errors) == 1 and "model_index.json is missing" in errors[0]
