"""`mmspec mesh` and `MeshPipeline` against hostile and careless input: ids and class names
that point outside the output folder, reruns that would mix results, torn records, the
grid of an interrupted run, and requests past the memory they imply."""

import json

import pytest
import torch
from PIL import Image
from transformers import OPTForCausalLM

from mmspec.commands.cli import main
from mmspec.models.adapters.mesh_opt import mesh_opt_config
from mmspec.pipelines.mesh import MeshPipeline


def saved_mesh_pipeline(folder, class_names):
    torch.manual_seed(0)
    model = OPTForCausalLM(mesh_opt_config(len(class_names), hidden=32, layers=1, heads=2)).eval()
    MeshPipeline(model, class_names=class_names).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def mesh_dir(tmp_path_factory):
    return saved_mesh_pipeline(tmp_path_factory.mktemp("mesh_pipeline"), ["box", "cone", "torus"])


def mesh(mesh_dir, out_dir, *flags):
    return main(["mesh", "--pipeline", str(mesh_dir), "--max-faces", "2", "--decoding", "ar", "--out-dir", str(out_dir), *flags])


def one_error(capsys) -> str:
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("mmspec mesh: error:"), errors
    return errors[0]


@pytest.mark.parametrize("item_id", ["../victim", "/tmp/mmspec-victim", "a/b", ".hidden", ".."])
def test_an_item_id_outside_the_output_folder_is_refused_before_any_work(mesh_dir, tmp_path, capsys, item_id):
    """`{"id": "../victim"}` used to write ./victim.glb and ./victim.png beside `--out-dir`,
    overwriting what was there; an absolute id wrote anywhere."""
    (tmp_path / "victim.glb").write_text("keep me")
    items = tmp_path / "j.jsonl"
    items.write_text(json.dumps({"id": item_id, "class": "box"}) + "\n")
    assert mesh(mesh_dir, tmp_path / "m", "--items", str(items)) == 2
    assert f"item id {item_id!r} is not a plain file name" in one_error(capsys)
    assert (tmp_path / "victim.glb").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.jsonl", "victim.glb"]


def test_a_class_name_of_the_pipeline_that_is_a_path_is_refused(tmp_path, capsys):
    """A `class_names` entry "../../pwn_torus" in model_index.json made `mesh --classes 1`
    write two folders above `--out-dir`."""
    pipe_dir = saved_mesh_pipeline(tmp_path / "pipe", ["box", "../../pwn_torus"])
    out = tmp_path / "a" / "b" / "m"
    assert mesh(pipe_dir, out, "--classes", "1") == 2
    assert "class name '../../pwn_torus' of the pipeline cannot name files" in one_error(capsys)
    assert not (tmp_path / "a").exists() and not list(tmp_path.glob("pwn_torus*"))


@pytest.mark.parametrize("flags, changed", [
    (["--decoding", "mc-sjd"], "decoding"),
    (["--seed", "3"], "seed"),
    (["--format", "obj"], "formats"),
    (["--temperature", "0.5"], "sampling"),
])
def test_a_rerun_with_other_settings_is_refused_until_restarted(mesh_dir, tmp_path, capsys, flags, changed):
    """A rerun with `--decoding ar` or `--seed 3` said "wrote 0 mesh(es)" and kept the old meshes."""
    assert mesh(mesh_dir, tmp_path, "--classes", "box") == 0
    before = (tmp_path / "records" / "box_0.json").read_text()
    capsys.readouterr()
    assert mesh(mesh_dir, tmp_path, "--classes", "box", *flags) == 2
    error = one_error(capsys)
    assert f"holds a run with other {changed} settings" in error and "--restart deletes its results" in error
    assert (tmp_path / "records" / "box_0.json").read_text() == before
    assert mesh(mesh_dir, tmp_path, "--classes", "box", *flags, "--restart") == 0
    records = [json.loads(line) for line in (tmp_path / "manifest.jsonl").read_text().splitlines()]
    assert len(records) == 1 and records[0]["id"] == "box_0"
    if changed == "seed":
        assert records[0]["seed"] == 3
    if changed == "formats":
        assert (tmp_path / "meshes" / "box_0.obj").is_file() and not (tmp_path / "meshes" / "box_0.glb").exists()


def test_a_rerun_whose_items_file_names_another_class_is_refused(mesh_dir, tmp_path, capsys):
    """Line-number ids: an items file naming another class was "done" and kept the old mesh."""
    (tmp_path / "a.txt").write_text("box\ncone\n")
    (tmp_path / "b.txt").write_text("box\ntorus\n")
    assert mesh(mesh_dir, tmp_path / "mi", "--items", str(tmp_path / "a.txt")) == 0
    capsys.readouterr()
    assert mesh(mesh_dir, tmp_path / "mi", "--items", str(tmp_path / "b.txt")) == 2
    assert "item 00001 of" in (error := one_error(capsys)) and "was generated for class 'cone', not for class 'torus'" in error
    assert mesh(mesh_dir, tmp_path / "mi", "--items", str(tmp_path / "b.txt"), "--restart") == 0
    records = [json.loads(line) for line in (tmp_path / "mi" / "manifest.jsonl").read_text().splitlines()]
    assert [r["class"] for r in records] == ["box", "torus"]


def test_a_torn_record_is_dropped_and_its_mesh_redone(mesh_dir, tmp_path, capsys):
    """A SIGKILL during the record's write left a truncated last line, and every rerun failed
    with "Unterminated string", naming no file."""
    assert mesh(mesh_dir, tmp_path, "--classes", "box", "cone") == 0
    record = tmp_path / "records" / "cone_0.json"
    whole = record.read_text()
    record.write_text(whole[: len(whole) // 2])
    capsys.readouterr()
    assert mesh(mesh_dir, tmp_path, "--classes", "box", "cone") == 0
    out = capsys.readouterr().out
    assert "box_0: recorded by an earlier run, skipped" in out and "wrote 1 mesh(es)" in out
    assert json.loads(record.read_text())["id"] == "cone_0"
    assert len((tmp_path / "manifest.jsonl").read_text().splitlines()) == 2


def test_a_folder_of_the_earlier_layout_with_a_torn_line_is_refused_in_one_line_and_restarts(mesh_dir, tmp_path, capsys):
    (tmp_path / "box_0.glb").write_text("old mesh")
    (tmp_path / "records.jsonl").write_text('{"id": "box_0", "class": "box"}\n{"id": "cone_0", "cla')
    assert mesh(mesh_dir, tmp_path, "--classes", "box") == 2
    assert "records.jsonl" in (error := one_error(capsys)) and "--restart" in error
    assert mesh(mesh_dir, tmp_path, "--classes", "box", "--restart") == 0
    assert not (tmp_path / "records.jsonl").exists() and not (tmp_path / "box_0.glb").exists()
    assert (tmp_path / "meshes" / "box_0.glb").is_file()


def test_the_grid_shows_every_mesh_of_an_interrupted_run(mesh_dir, tmp_path):
    """Killed after 1 of 2 meshes and rerun, grid.png showed the last invocation's mesh alone."""
    (tmp_path / "jobs.txt").write_text("box\nbox\n")
    assert mesh(mesh_dir, tmp_path / "o", "--items", str(tmp_path / "jobs.txt")) == 0
    (tmp_path / "o" / "records" / "00001.json").unlink()  # killed before the second mesh's record
    assert mesh(mesh_dir, tmp_path / "o", "--items", str(tmp_path / "jobs.txt")) == 0
    with Image.open(tmp_path / "o" / "grid.png") as grid:
        assert grid.width > 2 * 128 and grid.height < 2 * 128  # one row (one class) of two previews


def test_per_class_past_the_cache_budget_is_refused_before_any_work(mesh_dir, tmp_path, capsys):
    """`mesh --per-class 1000000` ran until killed."""
    assert main(["mesh", "--pipeline", str(mesh_dir), "--classes", "box", "--per-class", "1000000", "--out-dir", str(tmp_path / "o")]) == 2
    assert "--per-class 1000000 is more than the" in (error := one_error(capsys)) and "use --items" in error
    assert not (tmp_path / "o").exists()


def test_meshes_per_call_past_the_cache_budget_are_refused(mesh_dir):
    """`pipe(class_labels=7, num_meshes=10**6)` tried to allocate 925 GB."""
    pipe = MeshPipeline.from_pretrained(mesh_dir)
    limit = pipe.max_meshes_per_call
    assert 1 <= limit < 10**6 and pipe.max_meshes_for(1) > pipe.max_meshes_for(pipe.max_faces)
    with pytest.raises(ValueError, match=rf"^1000000 meshes in one call exceed this model's {limit} \(8 GiB of cache"):
        pipe(class_labels="box", num_meshes=10**6)
    with pytest.raises(ValueError, match="meshes in one call exceed"):
        pipe(class_labels=["box", "cone"], num_meshes=limit // 2 + 1)


@pytest.mark.parametrize("flags, named", [(["--window", "100000"], "window 100000"), (["--max-faces", "100000"], "max_faces")])
def test_a_window_or_face_count_past_the_model_is_refused_before_anything_is_written(mesh_dir, tmp_path, capsys, flags, named):
    """`mesh --window 100000` and `--max-faces 100000` wrote run.json and its folders, then refused."""
    out_dir = tmp_path / "m"
    code = main(["mesh", "--pipeline", str(mesh_dir), "--decoding", "sjd", "--out-dir", str(out_dir), *flags])
    assert code == 2 and named in one_error(capsys)
    assert not out_dir.exists()


def test_a_full_disk_is_one_line_and_a_rerun_resumes(mesh_dir, tmp_path, capsys, monkeypatch):
    """A write the disk refuses (ENOSPC) was a traceback; the results written before it stay."""
    import errno
    import os

    import mmspec.io.files as files

    real_replace, writes = os.replace, []

    def disk_fills_after_run_json(src, dst):
        writes.append(dst)
        if len(writes) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", disk_fills_after_run_json)
    out_dir = tmp_path / "m"
    assert mesh(mesh_dir, out_dir, "--classes", "box") == 2
    assert "No space left on device" in one_error(capsys)
    assert (out_dir / "run.json").exists() and not list(out_dir.rglob("*.tmp"))
    monkeypatch.setattr(files.os, "replace", real_replace)
    assert mesh(mesh_dir, out_dir, "--classes", "box") == 0
    assert (out_dir / "meshes" / "box_0.glb").exists()


def test_auto_chooses_its_window_unless_it_is_given(mesh_dir, tmp_path):
    """`mesh` pinned auto's window at 16, unlike every other verb."""
    assert main(["mesh", "--pipeline", str(mesh_dir), "--max-faces", "2", "--classes", "box", "--out-dir", str(tmp_path / "a")]) == 0
    assert json.loads((tmp_path / "a" / "run.json").read_text())["settings"]["decoding"]["window"] is None
    assert main(["mesh", "--pipeline", str(mesh_dir), "--max-faces", "2", "--classes", "box", "--window", "8",
                 "--out-dir", str(tmp_path / "b")]) == 0
    assert json.loads((tmp_path / "b" / "run.json").read_text())["settings"]["decoding"]["window"] == 8


def test_a_pipeline_of_another_family_is_refused_naming_its_verb(tmp_path, capsys):
    """`mesh --pipeline default` said only "holds a 'LlamaGenPipeline' pipeline, not a MeshPipeline"."""
    assert main(["mesh", "--pipeline", "default", "--out-dir", str(tmp_path / "m")]) == 2
    assert "use `mmspec generate --pipeline default`" in one_error(capsys)
    assert not (tmp_path / "m").exists()
