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


def test_a_duration_past_float_range_is_one_line(speech_dir, tmp_path, capsys):
    """`speak seven --duration 1e308` raised OverflowError (1e308 seconds times the frame
    rate is inf, which round() cannot take)."""
    for duration in ("1e308", "1e-300"):
        assert main(["speak", "one", "--pipeline", str(speech_dir), "--duration", duration, "--out", str(tmp_path / "a.wav")]) == 2
        error = one_error(capsys)
        assert "is outside what this model makes:" in error and " to " in error
    assert not (tmp_path / "a.wav").exists()


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_prompts_file_that_never_ends_is_one_line(speech_dir, tmp_path, capsys):
    """The reader of `--prompts` (batch, video --batch and speak) read /dev/zero until the
    kernel killed it."""
    assert speak(speech_dir, "/dev/zero", tmp_path / "b") == 2
    assert "holds more than the 67,108,864 bytes one run reads" in one_error(capsys)
    assert not (tmp_path / "b").exists()


def test_many_words_with_wide_branches_are_refused_by_the_forward_check(capsys, tmp_path):
    """`speak` of 256 words with `--branches 64 --window 51` was killed for memory: the
    forward's check now counts the attention over its 3160 inputs a row."""
    code = main(["speak", *["seven"] * 256, "--decoding", "mc-sjd", "--branches", "64", "--window", "51",
                 "--out", str(tmp_path / "a.wav")])
    assert code == 2
    assert "GiB of logits and attention scores for 256 sequence(s)" in one_error(capsys)
    assert not (tmp_path / "a.wav").exists()


def test_help_lists_what_speak_takes(capsys):
    """`speak --help` offered zipar and lpd-20 (refused by every speech pipeline), and named
    neither the previous-step drafts nor the relaxed rules speak takes."""
    assert main(["speak", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for taken in ("previous-step", "+pcg", "+gsd", "+lantern", "mc-sjd", "keyed", "prompt-lookup"):
        assert taken in text, taken
    for refused in ("zipar", "lpd-20", "above"):
        assert refused not in text, refused


@pytest.mark.parametrize("flags, named", [(["one", "--out-dir", "b"], "--out-dir"), (["--prompts", "p.txt", "--out", "a.wav"], "--out ")])
def test_an_output_flag_of_the_other_mode_is_refused_not_ignored(speech_dir, tmp_path, capsys, monkeypatch, flags, named):
    """`speak one --out-dir b` wrote outputs/speech.wav and ignored --out-dir."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.txt").write_text("one\n")
    assert main(["speak", "--pipeline", str(speech_dir), *flags]) == 2
    [error] = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert error.startswith("mmspec speak: error:") and named in error
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "b").exists()
