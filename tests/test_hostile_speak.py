"""`mmspec speak --prompts` against hostile and careless input: ids outside the output
folder, reruns that would mix results (refused, with a `--restart` that exists), torn
records and killed writes."""

import json
import os

import pytest

from mmspec.commands.cli import main
from tests.helpers.tiny_speech import tiny_speech_pipeline


@pytest.fixture(scope="module")
def speech_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("speech_pipeline")
    tiny_speech_pipeline().save_pretrained(folder)
    return folder


def speak(speech_dir, words, out_dir, *flags):
    return main(["speak", "--pipeline", str(speech_dir), "--decoding", "ar", "--prompts", str(words), "--out-dir", str(out_dir),
                 *flags])


def one_error(capsys) -> str:
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("mmspec speak: error:"), errors
    return errors[0]


def words(tmp_path, *lines, name="words.txt"):
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


@pytest.mark.parametrize("item_id", ["../victim", "/tmp/mmspec-victim", ".."])
def test_an_id_outside_the_output_folder_is_refused(speech_dir, tmp_path, capsys, item_id):
    items = tmp_path / "w.jsonl"
    items.write_text(json.dumps({"id": item_id, "prompt": "one"}) + "\n")
    assert speak(speech_dir, items, tmp_path / "b") == 2
    assert "is not a plain file name" in one_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.jsonl"]


def test_restart_exists_and_starts_a_run_with_other_settings_over(speech_dir, tmp_path, capsys):
    """The refusal said "restart it (--restart deletes its results)", but `--restart` was
    an unknown argument."""
    file = words(tmp_path, "one", "zero")
    assert speak(speech_dir, file, tmp_path / "b") == 0
    capsys.readouterr()
    assert speak(speech_dir, file, tmp_path / "b", "--seed", "1") == 2
    assert "holds a run with other seed settings" in (error := one_error(capsys)) and "--restart deletes its results" in error
    assert speak(speech_dir, file, tmp_path / "b", "--seed", "1", "--restart") == 0
    assert json.loads((tmp_path / "b" / "run.json").read_text())["settings"]["seed"] == 1
    assert len((tmp_path / "b" / "manifest.jsonl").read_text().splitlines()) == 2


def test_restart_without_a_batch_is_a_one_line_error(speech_dir, tmp_path, capsys):
    assert main(["speak", "one", "--pipeline", str(speech_dir), "--out", str(tmp_path / "a.wav"), "--restart"]) == 2
    assert "--restart clears a batch folder" in one_error(capsys)


def test_an_id_given_another_word_is_refused(speech_dir, tmp_path, capsys):
    """Line numbers are ids: another words file in the same folder would keep the old clips."""
    assert speak(speech_dir, words(tmp_path, "one"), tmp_path / "b") == 0
    capsys.readouterr()
    assert speak(speech_dir, words(tmp_path, "two", name="other.txt"), tmp_path / "b") == 2
    assert "item 000001 of" in (error := one_error(capsys)) and "was generated for 'one', not for 'two'" in error


def test_a_torn_record_and_a_killed_write_are_redone(speech_dir, tmp_path, capsys):
    """A torn record used to count as done, and the manifest took its half line."""
    file = words(tmp_path, "one", "zero")
    out = tmp_path / "b"
    assert speak(speech_dir, file, out) == 0
    first = (out / "audio" / "000001.wav").read_bytes()
    record = out / "records" / "000002.json"
    record.write_text(record.read_text()[:15])
    (out / "audio" / f".000002.wav.{os.getpid() + 1}.tmp").write_bytes(b"half")  # a write killed midway
    capsys.readouterr()
    assert speak(speech_dir, file, out) == 0
    assert "wrote 1 clips (1 already done)" in capsys.readouterr().out
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [m["prompt"] for m in manifest] == ["one", "zero"]
    assert (out / "audio" / "000001.wav").read_bytes() == first
    assert sorted(os.listdir(out / "audio")) == ["000001.wav", "000002.wav"]
