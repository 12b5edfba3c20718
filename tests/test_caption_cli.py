"""`mmspec caption`: captions printed per file, a resumable batch with atomic records and
recorded settings, and one-line errors for bad flags and files."""

import json

import pytest
import torch

from mmspec.commands.cli import main
from mmspec.datasets.shape_captions import load_scenes
from mmspec.io.images import to_pil
from mmspec.runs.batch import item_seed
from tests.helpers.tiny_captioner import tiny_captioner

FLAGS = ["--max-new-tokens", "6", "--decoding", "mc-sjd+lookup"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("caption")
    pipe = tiny_captioner()
    pipe.save_pretrained(root / "pipe")
    images = root / "images"
    images.mkdir()
    for i, image in enumerate(to_pil(load_scenes("heldout", 3)[0])):
        image.save(images / f"shape{i}.png")
    return root / "pipe", images, pipe


def test_captions_are_printed_per_file(saved, capsys):
    pipe_dir, images, pipe = saved
    files = sorted(images.iterdir())[:2]
    assert main(["caption", *map(str, files), "--pipeline", str(pipe_dir), *FLAGS]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = pipe([to_pil(load_scenes("heldout", 2)[0])[i] for i in range(2)], max_new_tokens=6, decoding="mc-sjd+lookup",
                    generator=torch.Generator().manual_seed(item_seed(0, "shape0")))  # the CLI's, which drafts depend on
    assert lines[:2] == [f"{files[0]}: {expected.text[0]}", f"{files[1]}: {expected.text[1]}"]
    forwards = max(s.forward_passes for s in expected.stats)  # the call's: until its longest caption is done
    assert lines[2].startswith(f"(2 image(s), mc-sjd+lookup: {forwards} forward passes, ")


def test_batch_resumes_and_refuses_other_settings(saved, tmp_path, capsys):
    pipe_dir, images, pipe = saved
    out = tmp_path / "out"
    run = ["caption", str(images), "--pipeline", str(pipe_dir), "--out", str(out), "--batch-size", "2", *FLAGS]
    assert main(run) == 0
    records = sorted((out / "records").glob("*.json"))
    assert [r.stem for r in records] == ["shape0", "shape1", "shape2"]
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [m["id"] for m in manifest] == ["shape0", "shape1", "shape2"] and all(m["caption"] for m in manifest)
    pictures = to_pil(load_scenes("heldout", 3)[0])
    each = [s.forward_passes for chunk, first in ((pictures[:2], "shape0"), (pictures[2:], "shape2"))  # batches of 2
            for s in pipe(chunk, max_new_tokens=6, decoding="mc-sjd+lookup",
                          generator=torch.Generator().manual_seed(item_seed(0, first))).stats]  # each image's own forwards
    assert [json.loads(r.read_text())["forward_passes"] for r in records] == each

    assert json.loads((out / "run.json").read_text())["settings"]["dtype"] == "float32"
    assert "on cpu in float32; manifest" in capsys.readouterr().out
    kept = records[0].stat().st_mtime_ns
    records[2].unlink()  # an interrupted run: one image not done
    assert main(run) == 0
    assert records[2].exists() and records[0].stat().st_mtime_ns == kept
    assert not list((out / "records").glob(".*.tmp"))

    capsys.readouterr()
    assert main([*run[:-1], "ar"]) == 2
    assert "holds a run with other call settings" in capsys.readouterr().err
    assert main([*run[:-1], "ar", "--restart"]) == 0


@pytest.mark.parametrize("flags, message", [
    (["missing.png"], "image 'missing.png' does not exist"),
    (["{image}", "--decoding", "zipar"], "unknown decoding 'zipar' for text"),
    (["{image}", "--temperature", "0.5"], "--temperature need --sample"),
    (["{image}", "--restart"], "--restart clears a batch folder"),
    (["{text}"], "cannot read image"),
])
def test_bad_flags_and_files_fail_in_one_line(saved, tmp_path, capsys, flags, message):
    pipe_dir, images, _ = saved
    (tmp_path / "notes.png").write_text("not an image")
    flags = [f.format(image=images / "shape0.png", text=tmp_path / "notes.png") for f in flags]
    assert main(["caption", *flags, "--pipeline", str(pipe_dir)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
