"""`mmspec speak` with a text-to-speech pipeline (the tiny Orpheus-format fixture): a text into
one WAV, a texts file into a batch that resumes, and one-line errors for what only the other
kind of speech pipeline takes."""

import json

import pytest
import torch

from mmspec.commands.cli import main
from mmspec.io.audio import read_wav
from tests.helpers.orpheus import orpheus_pipeline


@pytest.fixture(scope="module")
def orpheus_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("orpheus") / "pipe"
    orpheus_pipeline().save_pretrained(folder)
    return folder


def test_a_text_becomes_one_wav_equal_to_the_pipeline_s_clip(orpheus_dir, tmp_path, capsys):
    assert main(["speak", "--pipeline", str(orpheus_dir), "--voice", "tara", "--seed", "4", "hi", "there.",
                 "--out", str(tmp_path / "a.wav")]) == 0
    audio, rate = read_wav(tmp_path / "a.wav")
    out = orpheus_pipeline()("hi there.", voice="tara", generator=torch.Generator().manual_seed(4))
    assert rate == 24000 and audio.shape == out.audios[0].shape
    assert torch.allclose(audio, out.audios[0].clamp(-1, 1), atol=1e-4)  # 16-bit PCM
    printed = capsys.readouterr().out
    assert "voice tara" in printed and "forward passes" in printed


def test_a_texts_file_runs_as_a_batch_that_resumes(orpheus_dir, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("hi there.\nok\n")
    args = ["speak", "--pipeline", str(orpheus_dir), "--voice", "leo", "--prompts", str(texts), "--out-dir", str(tmp_path / "b"),
            "--decoding", "mc-sjd+previous-frame"]
    assert main(args) == 0
    assert sorted(p.name for p in (tmp_path / "b" / "audio").iterdir()) == ["000001.wav", "000002.wav"]
    record = json.loads((tmp_path / "b" / "records" / "000001.json").read_text())
    assert record["prompt"] == "hi there." and (record["device"], record["dtype"]) == ("cpu", "float32")
    assert main(args) == 0
    assert "(2 already done)" in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (["--voice", "zeus", "hi"], "unknown voice 'zeus'"),
    (["--duration", "1", "hi"], "--duration sets the digit model's clip length"),
    (["--max-new-tokens", "3", "hi"], "max_new_tokens must be"),
    (["--guidance-scale", "3", "hi"], "guidance_scale must be 1"),
])
def test_bad_text_to_speech_flags_are_one_line_errors(orpheus_dir, tmp_path, capsys, flags, message):
    assert main(["speak", "--pipeline", str(orpheus_dir), *flags, "--out", str(tmp_path / "x.wav")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and message in errors[0], errors
    assert not (tmp_path / "x.wav").exists()


def test_voice_is_refused_for_the_digit_model(tmp_path, capsys):
    assert main(["speak", "--voice", "tara", "seven", "--out", str(tmp_path / "x.wav")]) == 2
    assert "--voice and --max-new-tokens are for text-to-speech pipelines" in capsys.readouterr().err


def test_a_dia_pipeline_says_a_dialogue(tmp_path, capsys):
    from tests.helpers.dia import dia_pipeline

    dia_pipeline().save_pretrained(tmp_path / "dia")
    assert main(["speak", "--pipeline", str(tmp_path / "dia"), "[S1]", "hi.", "[S2]", "ok!", "--max-new-tokens", "24",
                 "--out", str(tmp_path / "d.wav")]) == 0
    audio, rate = read_wav(tmp_path / "d.wav")
    assert rate == dia_pipeline().sample_rate and len(audio) > 0
    assert main(["speak", "--pipeline", str(tmp_path / "dia"), "--voice", "tara", "hi", "--out", str(tmp_path / "e.wav")]) == 2
    assert "Dia has no named voices" in capsys.readouterr().err
