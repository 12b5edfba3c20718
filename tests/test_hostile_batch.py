"""`mmspec batch` against hostile and careless input: torn records, an images folder that
leads outside, an interrupted run resumed with other items, and a damaged run record."""

import json
import os

import pytest

from mmspec.runs.batch import Item, clear_results, run_batch, write_manifest
from mmspec.commands.cli import main
from tests.helpers.pipelines import tiny_c2i_pipeline


@pytest.fixture(scope="module")
def pipe():
    return tiny_c2i_pipeline()


def test_a_torn_record_is_redone_and_the_manifest_stays_whole(pipe, tmp_path):
    """A record torn by a kill used to count as done, and the manifest took its half line."""
    items = [Item("a", class_label=0), Item("b", class_label=1)]
    run_batch(pipe, items, tmp_path, decoding="ar")
    record = tmp_path / "records" / "b.json"
    record.write_text(record.read_text()[:25])
    assert [i.id for i in run_batch(pipe, items, tmp_path, decoding="ar")] == ["b"]
    assert [json.loads(line)["id"] for line in write_manifest(tmp_path, items).read_text().splitlines()] == ["a", "b"]


def test_an_images_folder_that_leads_outside_is_refused_before_any_work(pipe, tmp_path):
    """A symlinked `images/` used to take the images wherever it pointed."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "images").symlink_to(elsewhere)
    with pytest.raises(ValueError, match="'images/a.png' would be written to .*, outside the output folder"):
        run_batch(pipe, [Item("a", class_label=0)], out, decoding="ar")
    assert not list(elsewhere.iterdir()) and not (out / "run.json").exists()


def test_an_interrupted_run_resumed_with_another_class_for_an_undone_item_is_refused(pipe, tmp_path):
    """Only finished items were compared: an item the first invocation had not reached yet
    took the second file's class, and the folder held a run of two labels files."""
    first = [Item("000001", class_label=0), Item("000002", class_label=1)]
    with pytest.raises(KeyboardInterrupt):
        run_batch(pipe, first, tmp_path, decoding="ar",
                  on_item=lambda item, skipped: (_ for _ in ()).throw(KeyboardInterrupt))  # killed after the first item
    assert os.listdir(tmp_path / "records") == ["000001.json"]
    with pytest.raises(ValueError, match="item 000002 of .* was generated for class 1, not for class 2"):
        run_batch(pipe, [Item("000001", class_label=0), Item("000002", class_label=2)], tmp_path, decoding="ar")


def test_a_damaged_run_record_is_a_one_line_error_and_restart_clears_only_the_run(pipe, tmp_path):
    run_batch(pipe, [Item("a", class_label=0)], tmp_path, decoding="ar")
    (tmp_path / "notes.txt").write_text("mine")
    run_file = tmp_path / "run.json"
    recorded = json.loads(run_file.read_text())
    run_file.write_text(json.dumps({**recorded, "outputs": ["../../{id}"]}))
    with pytest.raises(ValueError, match=r"run.json is not a record of a run .*--restart deletes its results"):
        run_batch(pipe, [Item("a", class_label=0)], tmp_path, decoding="ar")
    clear_results(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["images", "notes.txt", "records"] and not os.listdir(tmp_path / "images")


def test_the_cli_restart_deletes_the_earlier_results(tmp_path, capsys):
    pipe = tiny_c2i_pipeline()
    pipe.save_pretrained(tmp_path / "pipe")
    (tmp_path / "labels.txt").write_text("0\n1\n")
    (tmp_path / "other.txt").write_text("2\n")
    batch = ["batch", "--pipeline", str(tmp_path / "pipe"), "--decoding", "ar", "--out", str(tmp_path / "b")]
    assert main([*batch, "--prompts", str(tmp_path / "labels.txt")]) == 0
    capsys.readouterr()
    assert main([*batch, "--prompts", str(tmp_path / "other.txt")]) == 2
    [error] = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert error.startswith("mmspec batch: error: item 000001 of") and "was generated for class 0, not for class 2" in error
    assert main([*batch, "--prompts", str(tmp_path / "other.txt"), "--restart"]) == 0
    assert os.listdir(tmp_path / "b" / "images") == ["000001.png"]
    [record] = [json.loads(line) for line in (tmp_path / "b" / "manifest.jsonl").read_text().splitlines()]
    assert record["class_label"] == 2


@pytest.fixture()
def saved(tmp_path):
    tiny_c2i_pipeline().save_pretrained(tmp_path / "pipe")
    return ["batch", "--pipeline", str(tmp_path / "pipe"), "--decoding", "ar", "--out", str(tmp_path / "b")]


def test_the_cli_takes_class_names_in_the_items_file(saved, tmp_path, capsys):
    """`mmspec batch` refused a names file ("class label 'c' is not an integer") though
    `mmspec generate --classes c` takes names."""
    (tmp_path / "names.txt").write_text("c\na\n")
    assert main([*saved, "--prompts", str(tmp_path / "names.txt")]) == 0
    records = [json.loads(line) for line in (tmp_path / "b" / "manifest.jsonl").read_text().splitlines()]
    assert [(r["id"], r["class_label"]) for r in records] == [("000001", 2), ("000002", 0)]


def test_an_unknown_class_name_is_one_line_and_exit_2_before_any_work(saved, tmp_path, capsys):
    (tmp_path / "names.txt").write_text("a\nsquare\n")
    assert main([*saved, "--prompts", str(tmp_path / "names.txt")]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"mmspec batch: error: {tmp_path / 'names.txt'}:2: unknown class 'square'; known classes: a, b, c"]
    assert not (tmp_path / "b" / "run.json").exists()


def test_a_rerun_that_gives_a_class_by_name_instead_of_by_label_is_the_same_run(saved, tmp_path, capsys):
    """A name and its label are one input: the rerun resumes, it is not refused as another
    class, and the finished item is not redone."""
    (tmp_path / "labels.txt").write_text("0\n")
    (tmp_path / "names.jsonl").write_text('{"id": "000001", "class_label": "a"}\n{"id": "000002", "class_label": "b"}\n')
    assert main([*saved, "--prompts", str(tmp_path / "labels.txt")]) == 0
    first = (tmp_path / "b" / "records" / "000001.json").stat().st_mtime_ns
    run = json.loads((tmp_path / "b" / "run.json").read_text())
    assert main([*saved, "--prompts", str(tmp_path / "names.jsonl")]) == 0, capsys.readouterr().err
    assert (tmp_path / "b" / "records" / "000001.json").stat().st_mtime_ns == first
    assert json.loads((tmp_path / "b" / "run.json").read_text())["items"][0] == run["items"][0]
    records = [json.loads(line) for line in (tmp_path / "b" / "manifest.jsonl").read_text().splitlines()]
    assert [(r["id"], r["class_label"]) for r in records] == [("000001", 0), ("000002", 1)]
    (tmp_path / "other.txt").write_text("b\n")  # and a name is compared as its label: b is class 1, not 0
    assert main([*saved, "--prompts", str(tmp_path / "other.txt")]) == 2
    assert "was generated for class 0, not for class 1" in capsys.readouterr().err


def test_a_rerun_says_how_many_items_it_wrote_and_how_many_were_done(saved, tmp_path, capsys):
    """A rerun with nothing left to do said "wrote 12 items"."""
    (tmp_path / "labels.txt").write_text("0\n1\n")
    argv = [*saved, "--prompts", str(tmp_path / "labels.txt")]
    assert main(argv) == 0
    assert "wrote 2 items (0 already done)" in capsys.readouterr().out
    assert main(argv) == 0
    assert "wrote 0 items (2 already done)" in capsys.readouterr().out
