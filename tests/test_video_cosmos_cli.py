"""`mmspec video` on a saved CosmosPipeline (the tiny pair): the conditioning frames of an
.mp4, a .gif or a folder of .png frames continued into a resumable run, a .jsonl batch, and
every refusal in one line with exit status 2 before anything is written."""

import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

from mmspec import CosmosPipeline, load_pipeline
from mmspec.commands.cli import main
from mmspec.io.video import read_video, save_video
from mmspec.runs.batch import item_seed
from tests.helpers.cosmos import save_tiny_pipeline, tiny_video
from tests.helpers.pipelines import tiny_video_pipeline
from tests.test_hostile_cli import assert_one_line_error


def as_uint8(video: torch.Tensor) -> np.ndarray:
    return (video * 255).round().byte().permute(0, 2, 3, 1).numpy()


@pytest.fixture(scope="module")
def cosmos_dir(tmp_path_factory):
    return save_tiny_pipeline(tmp_path_factory.mktemp("cosmos"))


@pytest.fixture(scope="module")
def class_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("video_pipeline")
    tiny_video_pipeline().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """clip.mp4 and clip.gif (17 frames of 64 x 64), short.gif (5 frames), small.gif (32 x 32),
    frames/ (3 .png frames), broken.mp4 (text)."""
    folder = tmp_path_factory.mktemp("clips")
    frames = as_uint8(tiny_video())
    save_video(frames, folder / "clip.mp4", fps=25)
    save_video(frames, folder / "clip.gif")
    save_video(frames[:5], folder / "short.gif")
    save_video(frames[:, ::2, ::2], folder / "small.gif")
    (folder / "frames").mkdir()
    for i, frame in enumerate(frames[:3]):
        Image.fromarray(frame).save(folder / "frames" / f"{i:03d}.png")
    (folder / "broken.mp4").write_text("not a video")
    return folder


@pytest.fixture
def threads():
    """`--threads` sets torch's for the whole process: put it back."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def video(pipe_dir, out, *flags) -> int:
    return main(["video", "--pipeline", str(pipe_dir), "--decoding", "ar", "--scale", "1", "--out", str(out), *flags])


def write_jsonl(path, *objects) -> None:
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))


def records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


def test_read_video_reads_mp4_gif_and_png_frames_up_to_max_frames(clips):
    frames = as_uint8(tiny_video())
    assert np.array_equal(read_video(clips / "clip.gif", 9), frames[:9])
    assert np.array_equal(read_video(clips / "frames", 9), frames[:3])
    mp4 = read_video(clips / "clip.mp4", 100)
    assert mp4.shape == (17, 64, 64, 3) and mp4.dtype == np.uint8
    assert np.abs(mp4.astype(int) - frames).mean() < 8  # lossy, but the same video
    assert read_video(clips / "clip.mp4", 1).shape == (1, 64, 64, 3)


def test_input_writes_the_continuation_of_the_pipelines_tokens_for_the_seed(cosmos_dir, clips, tmp_path, capsys, monkeypatch):
    """The run's video decodes the tokens the pipeline gives in Python for the same frames
    and seed: the conditioning frames' tokens first."""
    calls, call = [], CosmosPipeline.__call__

    def spy(self, *args, **kwargs):
        calls.append(call(self, *args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(CosmosPipeline, "__call__", spy)
    out = tmp_path / "world"
    flags = ["--input", str(clips / "clip.mp4"), "--input-frames", "9", "--seed", "3", "--format", "mp4"]
    assert video(cosmos_dir, out, *flags) == 0
    assert "wrote 1 videos (0 already done) on cpu in float32" in capsys.readouterr().out
    assert read_video(out / "videos" / "clip_3.mp4", 100).shape == (17, 64, 64, 3)
    [record] = records(out)
    assert (record["device"], record["dtype"]) == ("cpu", "float32")
    assert record["id"] == "clip_3" and record["seed"] == 3 and record["input_frames"] == 9
    assert (record["video"], record["input"], record["forward_passes"]) == ("videos/clip_3.mp4", str(clips / "clip.mp4"), 16)
    assert json.loads((out / "records" / "clip_3.json").read_text()) == record
    pipe = load_pipeline(cosmos_dir)
    frames = read_video(clips / "clip.mp4", 9)
    python = call(pipe, frames, num_input_frames=9, decoding="ar", output_type="tokens",
                  generator=torch.Generator().manual_seed(3))
    assert len(calls) == 1 and torch.equal(calls[0].tokens, python.tokens)
    condition = pipe.encode_condition(torch.from_numpy(frames).permute(0, 3, 1, 2)[None].float() / 255)
    assert torch.equal(calls[0].tokens[:, :32], condition)


def test_a_rerun_skips_what_is_done_and_adds_more_seeds(cosmos_dir, clips, tmp_path, capsys, threads):
    """Every decoding flag applies: `--decoding`, `--window`, `--init`, `--frame-rows`,
    `--temperature`, `--threads`, `--format` and `--scale`."""
    out = tmp_path / "world"
    flags = ["--input", str(clips / "clip.gif"), "--decoding", "mc-sjd", "--window", "6", "--init", "previous-frame",
             "--frame-rows", "2", "--temperature", "0.7", "--threads", "1", "--scale", "2", "--format", "gif"]
    assert main(["video", "--pipeline", str(cosmos_dir), "--out", str(out), *flags]) == 0
    capsys.readouterr()
    assert main(["video", "--pipeline", str(cosmos_dir), "--out", str(out), *flags, "--per-input", "2"]) == 0
    assert "wrote 1 videos (1 already done)" in capsys.readouterr().out
    assert [r["id"] for r in records(out)] == ["clip_0", "clip_1"]
    assert read_video(out / "videos" / "clip_1.gif", 100).shape == (17, 128, 128, 3)
    assert json.loads((out / "run.json").read_text())["settings"]["sampling"]["temperature"] == 0.7


def test_a_rerun_on_other_frames_under_the_same_name_is_refused(cosmos_dir, clips, tmp_path, capsys):
    out = tmp_path / "world"
    assert video(cosmos_dir, out, "--input", str(clips / "clip.gif")) == 0
    other = tmp_path / "clip.gif"
    save_video(as_uint8(tiny_video(seed=1)), other)
    capsys.readouterr()
    code, err = main(["video", "--pipeline", str(cosmos_dir), "--decoding", "ar", "--scale", "1", "--out", str(out),
                      "--input", str(other)]), capsys.readouterr().err
    assert_one_line_error(code, err, "item clip_0", "was generated for input frames 1, frames sha256", "--restart")


def test_a_batch_reads_videos_beside_its_file_and_resumes(cosmos_dir, clips, tmp_path, capsys, monkeypatch):
    items = tmp_path / "items" / "clips.jsonl"
    items.parent.mkdir()
    relative = os.path.relpath(clips, items.parent)
    write_jsonl(items, {"id": "drive", "video": f"{relative}/clip.mp4"},
                {"id": "walk", "video": f"{relative}/clip.gif", "input_frames": 9})
    monkeypatch.chdir(clips)  # paths are the .jsonl's, not the working directory's
    out = tmp_path / "worlds"
    assert video(cosmos_dir, out, "--batch", str(items)) == 0
    capsys.readouterr()
    assert video(cosmos_dir, out, "--batch", str(items)) == 0
    assert "wrote 0 videos (2 already done)" in capsys.readouterr().out
    drive, walk = records(out)
    assert (drive["id"], drive["input_frames"], drive["seed"]) == ("drive", 1, item_seed(0, "drive"))
    assert (walk["id"], walk["input_frames"], walk["forward_passes"]) == ("walk", 9, 16)
    assert sorted(p.name for p in (out / "videos").iterdir()) == ["drive.gif", "walk.gif"]


@pytest.mark.parametrize("flags, words", [
    (["--input", "{clips}/missing.mp4"], ["missing.mp4' does not exist"]),
    (["--input", "{clips}/broken.mp4"], ["cannot read video", "broken.mp4"]),
    (["--input", "{clips}/short.gif", "--input-frames", "9"], ["has 5 frames, fewer than the 9 conditioning frames"]),
    (["--input", "{clips}/frames", "--input-frames", "9"], ["has 3 frames, fewer than the 9"]),
    (["--input", "{clips}/small.gif"], ["frames of 32x32 pixels; this model takes 64x64", "resize it first"]),
    (["--input", "{clips}/clip.gif", "--input-frames", "5"], ["--input-frames must be one of 1, 9 for this model, got 5"]),
    (["--input", "{clips}/clip.gif", "--input-frames", "0"], ["argument --input-frames: must be a whole number >= 1"]),
    (["--input", "{clips}/clip.gif", "--temperature", "1e9"], ["temperature must be at most"]),
    (["--input", "{clips}/clip.gif", "--batch", "{tmp}/b.jsonl"], ["give one of --classes, --input or --batch"]),
    (["--classes", "0"], ["--classes does not apply to the CosmosPipeline", "use --input VIDEO or --batch items.jsonl"]),
    (["--input", "{clips}/clip.gif", "--per-class", "2"], ["--per-class does not apply", "use --per-input"]),
    (["--input", "{clips}/clip.gif", "--guidance-scale", "2"], ["--guidance-scale does not apply", "use --temperature"]),
    (["--input", "{clips}/clip.gif", "--frames", "17"], ["--frames does not apply", "use --input-frames"]),
    ([], ["continues a video: give --input VIDEO"]),
    (["--batch", "{tmp}/labels.txt"], ["--batch for a CosmosPipeline is a .jsonl"]),
    (["--batch", "{tmp}/b.jsonl", "--per-input", "2"], ["--per-input is for --input"]),
    (["--batch", "{tmp}/gone.jsonl"], ["gone.jsonl:1: video", "nowhere.mp4' does not exist"]),
    (["--batch", "{tmp}/text.jsonl"], ["text.jsonl:1: input_frames must be an integer, got '9'"]),
    (["--batch", "{tmp}/evil.jsonl"], ["evil.jsonl:1: item id '../victim' is not a plain file name"]),
    (["--batch", "{tmp}/twice.jsonl"], ["twice.jsonl:2: item id 'a' repeats line 1"]),
    (["--batch", "{tmp}/nine.jsonl"], ["nine.jsonl:1: input_frames must be one of 1, 9 for this model, got 2"]),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_refusals_are_one_line_before_anything_is_written(cosmos_dir, clips, tmp_path, capsys, flags, words):
    clip = f"{clips}/clip.gif"
    (tmp_path / "labels.txt").write_text("0\n")
    write_jsonl(tmp_path / "b.jsonl", {"video": clip})
    write_jsonl(tmp_path / "gone.jsonl", {"video": "nowhere.mp4"})
    write_jsonl(tmp_path / "text.jsonl", {"video": clip, "input_frames": "9"})
    write_jsonl(tmp_path / "evil.jsonl", {"id": "../victim", "video": clip})
    write_jsonl(tmp_path / "twice.jsonl", {"id": "a", "video": clip}, {"id": "a", "video": f"{clips}/clip.mp4"})
    write_jsonl(tmp_path / "nine.jsonl", {"video": clip, "input_frames": 2})
    flags = [f.format(clips=clips, tmp=tmp_path) for f in flags]
    code = video(cosmos_dir, tmp_path / "out", *flags)
    assert_one_line_error(code, capsys.readouterr().err, *words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, words", [
    (["--input", "{clips}/clip.gif"], ["--input does not apply to the VideoPipeline", "use --classes or --batch labels.txt"]),
    (["--classes", "0", "--input-frames", "9"], ["--input-frames does not apply to the VideoPipeline"]),
    (["--classes", "0", "--per-input", "2"], ["--per-input does not apply", "use --per-class"]),
])
def test_cosmos_flags_with_a_class_pipeline_are_refused_in_one_line(class_dir, clips, tmp_path, capsys, flags, words):
    code = video(class_dir, tmp_path / "out", *[f.format(clips=clips) for f in flags])
    assert_one_line_error(code, capsys.readouterr().err, *words)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags", [["--classes", "0"], ["--per-class", "2"], ["--guidance-scale", "2"], ["--frames", "17"], [],
                                   ["--input", "missing.mp4"], ["--input", "clip.gif", "--temperature", "1e9"]])
def test_flags_and_missing_videos_are_refused_before_loading(cosmos_dir, tmp_path, capsys, monkeypatch, flags):
    monkeypatch.setattr("mmspec.pipelines.load_pipeline", lambda *args, **kwargs: pytest.fail("the pipeline was loaded"))
    assert video(cosmos_dir, tmp_path / "out", *flags) == 2
