"""`mmspec train-drafter` and `--drafter`: training resumes, installing makes the head the
pipeline's own, it saves and loads with the pipeline, and bad input fails in one line."""

import json

import pytest
import torch

from mmspec.commands.cli import main
from mmspec.pipelines import load_pipeline
from tests.helpers.pipelines import tiny_c2i_pipeline


@pytest.fixture
def saved(tmp_path):
    folder = tmp_path / "pipe"
    tiny_c2i_pipeline(n_layer=2).save_pretrained(folder)
    return folder


def test_train_resume_install_and_use(saved, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train-drafter", "--pipeline", str(saved), "--out", str(out), "--batch-size", "2", "--threads", "1"]
    assert main(args + ["--steps", "2"]) == 0
    assert (out / "state.pt").is_file() and (out / "drafter" / "model.safetensors").is_file()
    assert main(args + ["--steps", "3", "--install"]) == 0
    printed = capsys.readouterr().out
    assert "resumed" in printed and "step 3/3" in printed and "installed" in printed and "(trained on cpu in float32)" in printed
    index = json.loads((saved / "model_index.json").read_text())
    assert index["drafter"] == ["mmspec.models.networks.draft_head", "DraftHead"]
    pipe = load_pipeline(saved)
    assert pipe.drafter is not None and pipe.drafter.target is pipe.transformer
    # the head drafts by default and gives AR's tokens; off and a folder are taken too
    ar = pipe(class_labels=[1], decoding="ar", output_type="tokens", generator=torch.Generator().manual_seed(3)).tokens
    keyed = pipe(class_labels=[1], decoding="keyed", output_type="tokens", generator=torch.Generator().manual_seed(3))
    assert torch.equal(keyed.tokens, ar)
    for drafter in ("off", str(out / "drafter")):
        grid = tmp_path / f"grid-{len(drafter)}.png"
        assert main(["generate", "--pipeline", str(saved), "--decoding", "keyed", "--drafter", drafter, "--classes", "a",
                     "--per-class", "1", "--out", str(grid)]) == 0
        assert grid.is_file()
    # saved again, the pipeline keeps its head
    pipe.save_pretrained(tmp_path / "again")
    assert load_pipeline(tmp_path / "again").drafter is not None


@pytest.mark.parametrize("args, message", [
    (["--layers", "x"], "--layers 'x' must be layer indices"),
    (["--layers", "7"], "the model has 2 layers"),
    (["--steps", "0"], "--steps: must be a whole number >= 1"),
])
def test_bad_training_input_is_one_line(saved, tmp_path, capsys, args, message):
    code = main(["train-drafter", "--pipeline", str(saved), "--out", str(tmp_path / "run"), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_other_families_are_refused(tmp_path, capsys):
    assert main(["train-drafter", "--pipeline", "speech", "--out", str(tmp_path / "run")]) == 2
    assert "class-conditional LlamaGen pipeline" in capsys.readouterr().err
    assert main(["generate", "--pipeline", "lpd", "--drafter", str(tmp_path), "--out", str(tmp_path / "g.png")]) == 2
    assert "takes no learned draft head" in capsys.readouterr().err
