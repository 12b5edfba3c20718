"""`mmspec video` against hostile and careless input: ids and class names outside the
output folder, reruns (batches and `--classes`) that would mix results, torn records, and `--per-class` and
`--scale` past the memory they imply (refused before any decoding)."""

import json

import pytest

from mmspec.commands.cli import main
from mmspec.commands.video import check_scale
from tests.helpers.pipelines import tiny_video_pipeline


@pytest.fixture(scope="module")
def pipe_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("video_pipeline")
    tiny_video_pipeline().save_pretrained(folder)
    return folder


def video(pipe_dir, out, *flags):
    return main(["video", "--pipeline", str(pipe_dir), "--decoding", "ar", "--scale", "1", "--out", str(out), *flags])


def one_error(capsys) -> str:
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("mmspec video: error:"), errors
    return errors[0]


def labels(tmp_path, name, *lines):
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines))
    return str(path)


@pytest.mark.parametrize("item_id", ["../victim", "/tmp/mmspec-victim", ".."])
def test_a_batch_id_outside_the_output_folder_is_refused(pipe_dir, tmp_path, capsys, item_id):
    items = tmp_path / "j.jsonl"
    items.write_text(json.dumps({"id": item_id, "class_label": 0}) + "\n")
    assert video(pipe_dir, tmp_path / "vb", "--batch", str(items)) == 2
    assert "is not a plain file name" in one_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.jsonl"]


def test_a_class_name_of_the_pipeline_that_is_a_path_is_refused_before_decoding(tmp_path, capsys):
    """Class names of a saved pipeline became file names unchecked."""
    pipe = tiny_video_pipeline()
    pipe._class_names = ["a", "../../pwn", "c"]
    pipe.save_pretrained(tmp_path / "pipe")
    assert video(tmp_path / "pipe", tmp_path / "x" / "y" / "v", "--classes", "0", "1") == 2
    assert "class name '../../pwn' of the pipeline cannot name files" in one_error(capsys)
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob("pwn*"))


def test_a_batch_rerun_with_another_class_is_refused_until_restarted(pipe_dir, tmp_path, capsys):
    """`--batch l3.txt` into the folder of `--batch l0.txt` said "wrote 0 videos (1 already
    done)", and the manifest kept the first class."""
    out = tmp_path / "vb"
    assert video(pipe_dir, out, "--batch", labels(tmp_path, "l0.txt", 0)) == 0
    capsys.readouterr()
    assert video(pipe_dir, out, "--batch", labels(tmp_path, "l2.txt", 2)) == 2
    error = one_error(capsys)
    assert "item 000001 of" in error and "was generated for class 0, not for class 2" in error and "--restart" in error
    assert video(pipe_dir, out, "--batch", labels(tmp_path, "l2.txt", 2), "--restart") == 0
    [record] = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert record["class_label"] == 2 and record["class_name"] == "c"


@pytest.mark.parametrize("flags, changed", [(["--scale", "2"], "scale"), (["--seed", "4"], "seed"), (["--frames", "2"], "frames")])
def test_a_batch_rerun_with_other_settings_is_refused(pipe_dir, tmp_path, capsys, flags, changed):
    out = tmp_path / "vb"
    batch = ["--batch", labels(tmp_path, "l.txt", 0)]
    assert video(pipe_dir, out, *batch) == 0
    capsys.readouterr()
    assert video(pipe_dir, out, *batch, *flags) == 2
    assert f"holds a run with other {changed} settings" in one_error(capsys)


def test_a_torn_batch_record_is_redone(pipe_dir, tmp_path, capsys):
    out = tmp_path / "vb"
    batch = ["--batch", labels(tmp_path, "l.txt", 0, 1)]
    assert video(pipe_dir, out, *batch) == 0
    record = out / "records" / "000002.json"
    record.write_text(record.read_text()[:20])
    capsys.readouterr()
    assert video(pipe_dir, out, *batch) == 0
    assert "wrote 1 videos (1 already done)" in capsys.readouterr().out
    assert [json.loads(line)["id"] for line in (out / "manifest.jsonl").read_text().splitlines()] == ["000001", "000002"]


def test_a_classes_rerun_with_other_settings_is_refused_until_restarted(pipe_dir, tmp_path, capsys):
    """`video --classes 0 --per-class 2`, then `--classes 0 --temperature 0.5` into the same
    `--out`, rewrote a_0.gif and kept the a_1.gif of the first settings beside it: rc 0, a
    folder of two runs and no record of either."""
    out = tmp_path / "vc"
    assert video(pipe_dir, out, "--classes", "0", "--per-class", "2") == 0
    capsys.readouterr()
    assert video(pipe_dir, out, "--classes", "0", "--temperature", "0.5") == 2
    error = one_error(capsys)
    assert "holds a run with other sampling settings" in error and "--restart" in error
    assert video(pipe_dir, out, "--classes", "0", "--temperature", "0.5", "--restart") == 0
    assert sorted(p.name for p in (out / "videos").iterdir()) == ["a_0.gif"]
    [record] = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert record["id"] == "a_0" and record["class_label"] == 0 and record["video"] == "videos/a_0.gif"


def test_a_classes_rerun_skips_what_is_done_and_adds_new_classes(pipe_dir, tmp_path, capsys):
    """A rerun of `video --classes` decoded every video again; it now resumes like a batch."""
    out = tmp_path / "vc"
    assert video(pipe_dir, out, "--classes", "a") == 0
    capsys.readouterr()
    assert video(pipe_dir, out, "--classes", "0", "c") == 0
    assert "wrote 1 videos (1 already done)" in capsys.readouterr().out
    assert [json.loads(line)["id"] for line in (out / "manifest.jsonl").read_text().splitlines()] == ["a_0", "c_0"]


def test_a_folder_of_videos_written_before_runs_were_recorded_is_refused_until_restarted(pipe_dir, tmp_path, capsys):
    """`video --classes` once wrote `{class}_{seed}.gif` at the top of `--out` with no record of
    its settings: such a folder is refused in one line, and `--restart` deletes those videos."""
    out = tmp_path / "vc"
    out.mkdir()
    (out / "a_0.gif").write_bytes(b"GIF89a old")
    (out / "b_3.mp4").write_bytes(b"old")
    (out / "notes.txt").write_text("keep me")
    assert video(pipe_dir, out, "--classes", "0") == 2
    error = one_error(capsys)
    assert "a_0.gif and 1 more" in error and "--restart" in error
    assert video(pipe_dir, out, "--classes", "0", "--restart") == 0
    assert sorted(p.name for p in out.iterdir()) == ["manifest.jsonl", "notes.txt", "records", "run.json", "videos"]


def test_per_class_past_the_cache_budget_is_refused_before_decoding(pipe_dir, tmp_path, capsys):
    """`video --per-class 1000000` ran until killed."""
    assert video(pipe_dir, tmp_path / "v", "--classes", "0", "--per-class", "1000000") == 2
    assert "--per-class 1000000 is more than the" in (error := one_error(capsys)) and "use --batch" in error
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize("mode", [["--classes", "0"], ["--batch", "{labels}"]])
def test_a_scale_past_memory_is_refused_before_decoding(pipe_dir, tmp_path, capsys, mode):
    """`video --classes 0 --scale 10000` decoded first, then failed allocating 2.24 TiB."""
    mode = [m.format(labels=labels(tmp_path, "l.txt", 0)) for m in mode]
    assert main(["video", "--pipeline", str(pipe_dir), "--scale", "10000", "--out", str(tmp_path / "v"), *mode]) == 2
    assert "--scale must be a whole number from 1 to 682 for 3 frames of 6x6 pixels" in one_error(capsys)
    assert not (tmp_path / "v").exists()


def test_check_scale_follows_the_frames_and_the_memory():
    assert check_scale(128, 8, (32, 32)) == 128
    with pytest.raises(ValueError, match="from 1 to 128 for 8 frames of 32x32 pixels"):
        check_scale(129, 8, (32, 32))
    with pytest.raises(ValueError, match="from 1 to 2 for 1000 frames of 256x256 pixels"):
        check_scale(10, 1000, (256, 256))


def test_auto_chooses_its_window_and_first_drafts_unless_they_are_given():
    """`video` pinned auto's window at 16 and its first drafts at previous-frame, unlike
    every other verb; the other methods still start from the frame before."""
    from mmspec.commands.cli import build_parser
    from mmspec.commands.video import decoding_config

    def config(*flags):
        return decoding_config(build_parser().parse_args(["video", *flags]))

    assert (config().window, config().init) == (None, None)
    assert (config("--window", "8", "--init", "above").window, config("--init", "above").init) == (8, "above")
    assert config("--decoding", "mc-sjd").init == "previous-frame"
    assert config("--decoding", "mc-sjd+above").init == "above"


def test_a_batch_file_takes_class_names_as_the_classes_flag_does(pipe_dir, tmp_path, capsys):
    """`--batch` refused the class names that `--classes` takes ("class label 'c' is not an integer")."""
    out = tmp_path / "vb"
    assert video(pipe_dir, out, "--batch", labels(tmp_path, "names.txt", "c")) == 0
    [record] = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert record["class_label"] == 2 and record["class_name"] == "c"
