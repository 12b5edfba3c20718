"""The demo's Speech tab: it builds inside a tab, and its handler returns two playable clips
from one seed, a cost table and one commit heatmap per method over (codebook, frame)."""

import pytest
import torch

pytest.importorskip("gradio", reason="the demo needs the [demo] extra")
import gradio as gr  # noqa: E402

from mmspec.apps.audio_tab import FAST_METHODS, build_speech_tab, commit_frames, speak_both  # noqa: E402
from mmspec.apps.demo import TABS  # noqa: E402
from tests.helpers.tiny_speech import tiny_speech_pipeline  # noqa: E402


@pytest.fixture(scope="module")
def pipe():
    p = tiny_speech_pipeline()
    p.set_progress_bar_config(disable=True)
    return p


def test_the_tab_is_registered_and_builds(pipe):
    assert ("Speech", "mmspec.apps.audio_tab", "build_speech_tab") in [tab[:3] for tab in TABS]
    with gr.Blocks() as demo, gr.Tab("Speech"):
        build_speech_tab(pipe)
    assert any(isinstance(block, gr.Audio) for block in demo.blocks.values())


@pytest.mark.parametrize("method", list(FAST_METHODS))
def test_ar_and_the_accelerated_method_side_by_side(pipe, method):
    ar, fast, rows, maps, same = speak_both(pipe, "one", method, 3, dict(guidance_scale=3.0, temperature=1.0))
    assert ar[0] == fast[0] == 22_050 and ar[1].shape == fast[1].shape == (14 * 352,)
    assert rows[0][0] == "ar" and rows[0][2] == 17 and len(maps) == 2
    assert rows[1][1] == ("yes" if FAST_METHODS[method].exact else "no")  # the grouped rule is relaxed
    assert ("pcg" in FAST_METHODS[method].name) != FAST_METHODS[method].exact
    # the line under the clips says what the table's last column says, from the tokens
    assert same.startswith("**Token-identical to AR:**") == (rows[1][-1] == "yes")


def test_commit_frames_undo_the_delay_pattern():
    # step t holds frame t - k of codebook k: a frame's codebooks commit at steps f .. f + K - 1
    frames = commit_frames(torch.arange(6), codebooks=3)
    assert frames.tolist() == [[0, 1, 2, 3], [1, 2, 3, 4], [2, 3, 4, 5]]
