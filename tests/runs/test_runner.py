import json
import os

import pytest

from mmspec.runs.runner import Run, RunItem, clear_run, describe

OUT = ("files/{id}.txt",)


def run_of(out_dir, items, settings=None, **kwargs):
    return Run(out_dir, settings or {"seed": 0}, items, outputs=OUT, **kwargs)


def finish(run, item, text="x"):
    run.path(item, OUT[0]).write_text(text)
    run.write_record(item, {"text": text})


def test_a_run_resumes_grows_and_lists_every_item_in_its_order(tmp_path):
    a, b, c = (RunItem(i, {"prompt": i}, seed=n) for n, i in enumerate("abc"))
    run = run_of(tmp_path, [a, b]).start()
    assert [i.id for i in run.todo()] == ["a", "b"]
    finish(run, a)
    run = run_of(tmp_path, [c, b]).start()  # a later invocation adds c
    assert [i.id for i in run.todo()] == ["c", "b"]
    finish(run, c)
    assert [i.id for i, _ in run.finished()] == ["a", "c"]  # the run's order: a was given first
    assert [json.loads(line)["id"] for line in run.write_manifest().read_text().splitlines()] == ["a", "c"]
    assert [i["id"] for i in json.loads((tmp_path / "run.json").read_text())["items"]] == ["a", "b", "c"]


@pytest.mark.parametrize("item, message", [
    (RunItem("a", {"prompt": "b"}, seed=0), "item a of .* was generated for 'a', not for 'b'"),
    (RunItem("a", {"prompt": "a"}, seed=5), "item a of .* was generated with seed 0, not 5"),
])
def test_an_id_with_other_inputs_or_seed_is_refused_even_before_it_is_done(tmp_path, item, message):
    done = RunItem("z", {"prompt": "z"}, seed=0)
    finish(run_of(tmp_path, [RunItem("a", {"prompt": "a"}, seed=0), done]).start(), done)
    with pytest.raises(ValueError, match=message + ".*--restart deletes its results"):
        run_of(tmp_path, [item]).start()
    assert len(run_of(tmp_path, [item]).start(restart=True).todo()) == 1


def test_other_settings_are_refused_by_name_once_an_item_is_done(tmp_path):
    item = RunItem("a", {}, seed=0)
    run_of(tmp_path, [item], {"seed": 0, "decoding": "sjd"}).start()  # failed on its first item: replaced
    finish(run_of(tmp_path, [item], {"seed": 0, "decoding": "ar"}).start(), item)
    with pytest.raises(ValueError, match="holds a run with other decoding settings"):
        run_of(tmp_path, [item], {"seed": 0, "decoding": "sjd"}).start()
    with pytest.raises(ValueError, match="holds a run with other format settings"):
        run_of(tmp_path, [item], {"seed": 0, "decoding": "ar", "format": "gif"}).start()


def test_the_dtype_is_a_setting_and_the_device_is_recorded_in_run_json_and_every_record(tmp_path):
    item, other = RunItem("a", {}, seed=0), RunItem("b", {}, seed=0)
    run = run_of(tmp_path, [item, other], placement={"device": "cuda:0", "dtype": "bfloat16"}).start()
    assert run.settings == {"seed": 0, "dtype": "bfloat16"}
    finish(run, item)
    recorded = json.loads((tmp_path / "run.json").read_text())
    assert recorded["settings"]["dtype"] == "bfloat16" and recorded["device"] == "cuda:0"
    assert json.loads((tmp_path / "records" / "a.json").read_text())["device"] == "cuda:0"
    with pytest.raises(ValueError, match="holds a run with other dtype settings"):
        run_of(tmp_path, [item], placement={"device": "cuda:0", "dtype": "float32"}).start()
    run = run_of(tmp_path, [other], placement={"device": "cpu", "dtype": "bfloat16"}).start()  # another device resumes
    finish(run, other)
    assert json.loads((tmp_path / "run.json").read_text())["device"] == "cpu"
    assert [r["device"] for _, r in run.finished()] == ["cuda:0", "cpu"]  # each item's own


def test_a_run_recorded_before_dtypes_were_ran_in_float32(tmp_path):
    item = RunItem("a", {}, seed=0)
    finish(run_of(tmp_path, [item]).start(), item)
    run_of(tmp_path, [item], placement={"device": "cpu", "dtype": "float32"}).start()
    finish(run_of(tmp_path / "again", [item]).start(), item)
    with pytest.raises(ValueError, match="holds a run with other dtype settings"):
        run_of(tmp_path / "again", [item], placement={"device": "cpu", "dtype": "bfloat16"}).start()


def test_a_torn_record_and_a_missing_file_are_redone_and_temporary_files_removed(tmp_path):
    items = [RunItem(i, {}, seed=0) for i in "abc"]
    run = run_of(tmp_path, items).start()
    for item in items:
        finish(run, item)
    (tmp_path / "records" / "a.json").write_text('{"id": "a", "te')
    (tmp_path / "files" / "b.txt").unlink()
    stale = tmp_path / "files" / f".b.txt.{os.getpid() + 1}.tmp"
    stale.write_text("half")
    other = tmp_path / "files" / ".c.txt.x.tmp"  # not a temporary file of ours
    other.write_text("keep")
    assert [i.id for i in run_of(tmp_path, items).start().todo()] == ["a", "b"]
    assert not (tmp_path / "records" / "a.json").exists() and not stale.exists() and other.exists()


def test_restart_deletes_the_run_and_nothing_else(tmp_path):
    items = [RunItem("a", {}, seed=0)]
    run = run_of(tmp_path, items, extras=("grid.png",)).start()
    finish(run, items[0])
    run.write_manifest()
    (tmp_path / "grid.png").write_text("grid")
    (tmp_path / "files" / "mine.txt").write_text("mine")
    run_of(tmp_path, [], {"seed": 1}, extras=("grid.png",)).start(restart=True)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "files", "files/mine.txt", "records", "run.json"]


def test_results_without_a_run_record_are_refused(tmp_path):
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "a.json").write_text("{}")
    with pytest.raises(ValueError, match=r"holds results without a record of their settings and inputs \(records\)"):
        run_of(tmp_path, []).start()
    clear_run(tmp_path, OUT)
    run_of(tmp_path, []).start()


def test_ids_and_patterns_are_checked():
    with pytest.raises(ValueError, match="item id '../a' is not a plain file name"):
        RunItem("../a", {}, seed=0)
    with pytest.raises(ValueError, match="given twice"):
        Run("o", {}, [RunItem("a", {}, 0), RunItem("a", {}, 0)])
    with pytest.raises(ValueError, match="output patterns"):
        Run("o", {}, [], outputs=("../{id}.png",))
    assert describe({"prompt": None, "class_label": 3}) == "class 3"
