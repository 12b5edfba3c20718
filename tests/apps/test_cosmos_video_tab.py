"""The Video tab given a Cosmos-Predict1 pipeline (video to world): it builds around a saved tiny
pipeline with an upload, the input frame choices and the methods it takes; `/continue_video`
continues an uploaded MP4 by AR and by an accelerated method from one seed (one video under
auto), and refuses an upload it cannot take in one line through `gr.Error`."""

import numpy as np
import pytest

gr = pytest.importorskip("gradio", reason="the demo needs the [demo] extra")
pytest.importorskip("av", reason="reading and writing MP4 needs PyAV")

from mmspec.apps.cosmos_tab import METHODS, continue_both, fast_methods  # noqa: E402
from mmspec.apps.demo import TABS  # noqa: E402
from mmspec.apps.video_tab import build_video_tab  # noqa: E402
from mmspec.io.video import read_video, save_video  # noqa: E402
from mmspec.pipelines import load_pipeline  # noqa: E402
from mmspec.pipelines.cosmos import CosmosPipeline  # noqa: E402
from tests.helpers.cosmos import TOKENIZER, tiny_video, write_tiny_checkpoint  # noqa: E402
from tests.helpers.demo import client, free_port  # noqa: E402

AUTO = next(iter(METHODS))


def as_frames(video) -> np.ndarray:
    """Float `[F, 3, H, W]` in [0, 1] as uint8 `[F, H, W, 3]`."""
    return (video * 255).round().byte().permute(0, 2, 3, 1).numpy()


@pytest.fixture(scope="module")
def pipe(tmp_path_factory):
    root = tmp_path_factory.mktemp("cosmos")
    CosmosPipeline.from_cosmos(write_tiny_checkpoint(root / "checkpoint"), TOKENIZER).save_pretrained(root / "saved")
    return load_pipeline(root / "saved")


@pytest.fixture(scope="module")
def uploads(tmp_path_factory):
    """Files as a browser uploads them: MP4s of the model's 64 x 64 frames (17), of too few of
    them (5), of 32 x 32 frames, and a text file named .mp4."""
    root = tmp_path_factory.mktemp("uploads")
    frames = as_frames(tiny_video())
    (root / "notes.mp4").write_text("not a video at all")
    return dict(good=str(save_video(frames, root / "good.mp4", fps=25)), short=str(save_video(frames[:5], root / "short.mp4")),
                small=str(save_video(frames[:, ::2, ::2], root / "small.mp4")), text=str(root / "notes.mp4"))


@pytest.fixture(scope="module")
def endpoint(pipe):
    """The tab built around `pipe` and its `/continue_video` function."""
    with gr.Blocks() as demo, gr.Tab("Video"):
        build_video_tab(pipe)
    return demo, next(f.fn for f in demo.fns.values() if f.api_name == "continue_video")


def test_the_video_tab_takes_a_cosmos_pipeline(pipe, endpoint):
    assert "CosmosPipeline" in next(tab[3] for tab in TABS if tab[0] == "Video")
    blocks = list(endpoint[0].blocks.values())
    assert sum(isinstance(b, gr.Video) for b in blocks) == 3  # the upload, AR's continuation, the accelerated one
    assert any(isinstance(b, gr.Radio) and b.label == "input frames" and [c[0] for c in b.choices] == ["1", "9"] for b in blocks)
    assert list(fast_methods(pipe))[:2] == [AUTO, "keyed, previous-frame drafts (AR's video)"]
    assert any(isinstance(b, gr.Dropdown) and [c[0] for c in b.choices] == list(fast_methods(pipe)) for b in blocks)


@pytest.mark.parametrize("given", ["1", "9"])
def test_ar_and_auto_continue_an_upload_into_one_video(endpoint, uploads, given):
    ar, fast, rows, ar_heat, fast_heat, status = endpoint[1](uploads["good"], given, AUTO, 3)
    assert ar.endswith(".mp4") and fast.endswith(".mp4") and ar != fast
    assert [r[0] for r in rows] == ["ar", "auto"] and rows[1][-1] == "yes"  # the same tokens, under keyed sampling
    generated = 2 if given == "1" else 1  # latent frames: the first frame is one, the next 8 another
    assert rows[0][2] == generated * 16  # AR's forwards: one per token of the generated latent frames
    assert np.array_equal(read_video(ar, 17), read_video(fast, 17)) and len(read_video(ar, 100)) == 17
    assert ar_heat.size == fast_heat.size == (generated * 100 - 4, 96)  # one 96-pixel heatmap per generated latent frame
    assert "**AR**: " in status and "forwards" in status and "token for token" in status


def test_another_seed_is_another_video(pipe, uploads, tmp_path):
    frames = read_video(uploads["good"], 1)
    first, second = (continue_both(pipe, frames, 1, AUTO, seed, tmp_path / str(seed)) for seed in (0, 1))
    assert not np.array_equal(read_video(first[0], 17), read_video(second[0], 17))


@pytest.mark.parametrize("upload, given, message", [
    ("small", "1", "this model continues videos of 64 x 64 pixels (height x width); the upload's frames are 32 x 32"),
    ("short", "9", "the upload has 5 frame(s), fewer than the 9 input frames chosen"),
    ("text", "1", "cannot read video 'notes.mp4': "),
    (None, "1", "upload a video to continue"),
])
def test_an_upload_it_cannot_take_is_one_line_gr_error(endpoint, uploads, upload, given, message):
    with pytest.raises(gr.Error) as err:
        endpoint[1](uploads[upload] if upload else None, given, AUTO, 0)
    assert err.value.message.startswith("Cannot continue the video: ") and message in err.value.message
    assert "\n" not in err.value.message


def test_the_api_names_continue_video_and_refuses_a_wrong_size_in_one_line(endpoint, uploads, capfd):
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    port = free_port()
    demo = endpoint[0]
    demo.queue().launch(server_port=port, prevent_thread_lock=True)
    try:
        c = client(f"http://127.0.0.1:{port}/", timeout=30)
        api = c.view_api(return_format="dict", print_info=False)["named_endpoints"]["/continue_video"]
        assert [p["parameter_name"] for p in api["parameters"]] == ["video", "input_frames", "method", "seed"]
        assert [r["label"] for r in api["returns"]] == ["AR", "accelerated", "stats", "AR: commit forward per latent frame",
                                                         "accelerated: commit forward per latent frame", "status"]
        with pytest.raises(AppError) as err:
            c.predict(video=handle_file(uploads["small"]), input_frames="1", method=AUTO, seed=0,
                      api_name="/continue_video")
        assert "resize it first" in str(err.value) and "\n" not in str(err.value) and "Traceback" not in str(err.value)
        ar, fast, stats, *_, status = c.predict(video=handle_file(uploads["good"]), input_frames="9", method=AUTO,
                                                seed=0, api_name="/continue_video")
        assert [r[-1] for r in stats["data"]] == ["yes", "yes"] and status.startswith("**AR**")
    finally:
        demo.close()
    assert "Traceback" not in capfd.readouterr().err  # a refusal is not logged as a fault
