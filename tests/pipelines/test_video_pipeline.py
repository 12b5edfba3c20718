import json
import numpy as np
import pytest
import torch
from PIL import Image

from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.drafts import DRAFTER_NAMES
from mmspec.decoding.schedules import Frames
from mmspec.pipelines import load_pipeline
from mmspec.pipelines.video import VideoPipeline
from tests.helpers.pipelines import VIDEO_FRAMES, VIDEO_GRID, tiny_video_pipeline

FRAMES, GRID = VIDEO_FRAMES, VIDEO_GRID


@pytest.fixture(scope="module")
def pipe():
    return tiny_video_pipeline()


@pytest.mark.parametrize("init", [*(n for n in DRAFTER_NAMES if n != "previous-step"), "previous-frame+above", "lookup+previous-frame"])
@pytest.mark.parametrize("method", ["sjd", "mc-sjd"])
def test_greedy_with_every_drafter_is_ar_on_the_video_layout(pipe, method, init):
    greedy = dict(class_labels=[0, 1, 2], temperature=0, output_type="tokens", generator=torch.Generator().manual_seed(0))
    ar = pipe(decoding="ar", **greedy).tokens
    out = pipe(decoding=DecodingConfig(method, window=5, init=init), **greedy)
    assert torch.equal(out.tokens, ar)
    assert out.stats[0].exact


@pytest.mark.parametrize("schedule", [Frames(1), Frames(2, zipar_window=2)])
def test_greedy_frame_schedule_is_the_same_with_every_drafter(pipe, schedule):
    """The frame schedule changes the context (relaxed), so drafters are compared under it."""
    greedy = dict(class_labels=[0, 2], temperature=0, output_type="tokens")
    plain = pipe(decoding=DecodingConfig("mc-sjd", window=4, schedule=schedule), generator=torch.Generator().manual_seed(0), **greedy)
    assert not plain.stats[0].exact
    for init in ("previous-frame", "above", "lookup"):
        out = pipe(decoding=DecodingConfig("mc-sjd", window=4, init=init, schedule=schedule), generator=torch.Generator().manual_seed(1),
                   **greedy)
        assert torch.equal(out.tokens, plain.tokens), init


def test_layout_has_frame_row_col_axes_and_previous_frame_neighbours(pipe):
    layout = pipe.transformer.layout()
    assert layout.axes == ("frame", "row", "col") and layout.shape == (FRAMES, GRID, GRID)
    previous = layout.neighbour("frame")
    assert (previous[: GRID * GRID] == -1).all()
    assert torch.equal(previous[GRID * GRID:], torch.arange(GRID * GRID * (FRAMES - 1)))


def test_output_types_and_frame_prefix(pipe):
    kw = dict(class_labels=[2], decoding="ar", generator=torch.Generator().manual_seed(0))
    pil = pipe(**kw).videos
    assert len(pil) == 1 and len(pil[0]) == FRAMES and all(isinstance(f, Image.Image) and f.size == (6, 6) for f in pil[0])
    np_videos = pipe(output_type="np", **{**kw, "generator": torch.Generator().manual_seed(0)}).videos
    assert np_videos.shape == (1, FRAMES, 6, 6, 3) and 0 <= np_videos.min() <= np_videos.max() <= 1
    short = pipe(num_frames=2, output_type="pt", **{**kw, "generator": torch.Generator().manual_seed(0)})
    assert short.videos.shape == (1, 2, 3, 6, 6) and short.tokens.shape == (1, 2 * GRID * GRID)


@pytest.mark.parametrize("bad, message", [
    (dict(num_frames=FRAMES + 1), "num_frames must be an integer from 1 to 3"),
    (dict(num_frames=0), "num_frames must be an integer from 1 to 3"),
    (dict(class_labels=[3]), "class label 3 is out of range"),
    (dict(decoding=DecodingConfig("mc-sjd", window=28)), "window 28 is longer than the 27-token sequence"),
])
def test_bad_input_is_a_one_line_error(pipe, bad, message):
    with pytest.raises(ValueError, match=message) as err:
        pipe(**{"class_labels": [0], "decoding": "ar", **bad})
    assert "\n" not in str(err.value)


def test_unknown_class_name_is_a_one_line_error(pipe):
    assert pipe.class_label("b") == 1
    with pytest.raises(ValueError, match="unknown class 'zebra'; choose from a, b, c"):
        pipe.class_label("zebra")


def test_save_and_load_round_trip(pipe, tmp_path):
    pipe.save_pretrained(tmp_path)
    loaded = load_pipeline(tmp_path)
    assert isinstance(loaded, VideoPipeline) and loaded.fps == 4 and loaded.class_names == ["a", "b", "c"]
    assert json.loads((tmp_path / "model_index.json").read_text())["_class_name"] == "VideoPipeline"
    loaded.set_progress_bar_config(disable=True)
    kw = dict(class_labels=[1], decoding="mc-sjd", output_type="tokens")
    a = pipe(generator=torch.Generator().manual_seed(3), **kw).tokens
    assert torch.equal(loaded(generator=torch.Generator().manual_seed(3), **kw).tokens, a)


def test_gif_and_mp4_hold_every_frame(pipe, tmp_path):
    av = pytest.importorskip("av", reason="MP4 needs PyAV (the video extra)")
    out = pipe([0], decoding="ar", generator=torch.Generator().manual_seed(0))
    gif = pipe.save_video(out.videos[0], tmp_path / "v.gif", scale=2)
    mp4 = pipe.save_video(out.videos[0], tmp_path / "v.mp4", scale=2)
    with Image.open(gif) as im:
        assert im.n_frames == FRAMES and im.size == (12, 12)
    with av.open(str(mp4)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == FRAMES and frames[0].shape == (12, 12, 3)


def test_video_formats_without_an_encoder_are_one_line_errors(pipe, tmp_path, monkeypatch):
    import importlib.util

    video = np.zeros((2, 4, 4, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="unknown video format 'avi'; choose from gif, mp4"):
        pipe.save_video(video, tmp_path / "v.avi")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "av" else real(name, *a))
    with pytest.raises(ValueError, match="writing MP4 needs PyAV, which is not installed"):
        pipe.save_video(video, tmp_path / "v.mp4")
    assert not (tmp_path / "v.mp4").exists()


def run_cli(capsys, *args):
    """`mmspec video ...` in this process: (exit status, stdout, stderr)."""
    from mmspec.commands.cli import main

    code = main(["video", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_writes_videos_and_resumes_batches(pipe, tmp_path, capsys):
    pipe.save_pretrained(tmp_path / "pipe")
    common = ["--pipeline", str(tmp_path / "pipe"), "--window", "4"]
    code, _, err = run_cli(capsys, *common, "--classes", "a", "2", "--out", str(tmp_path / "videos"))
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "videos" / "videos").iterdir()) == ["a_0.gif", "c_0.gif"]
    (tmp_path / "labels.txt").write_text("0\n2\n")
    batch = [*common, "--batch", str(tmp_path / "labels.txt"), "--format", "mp4", "--frame-rows", "1", "--out", str(tmp_path / "b")]
    code, _, err = run_cli(capsys, *batch)
    assert code == 0, err
    code, out, _ = run_cli(capsys, *batch)
    assert code == 0 and "wrote 0 videos (2 already done)" in out
    assert len((tmp_path / "b" / "manifest.jsonl").read_text().splitlines()) == 2
    for bad, message in [(["--frames", "9"], "num_frames must be an integer from 1 to 3"),
                         (["--classes", "zebra"], "unknown class 'zebra'"),
                         (["--format", "avi"], "unknown video format 'avi'")]:
        code, _, err = run_cli(capsys, *common, *bad, "--out", str(tmp_path / "x"))
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1
