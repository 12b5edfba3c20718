import pytest

gr = pytest.importorskip("gradio", reason="the demo needs the [demo] extra")

from mmspec.apps.video_tab import METHODS, build_video_tab, compare_videos  # noqa: E402
from tests.helpers.pipelines import tiny_video_pipeline  # noqa: E402


def test_video_tab_builds_and_compares_ar_with_an_accelerated_method(tmp_path):
    pipe = tiny_video_pipeline()
    with gr.Blocks() as demo, gr.Tab("Video"):
        build_video_tab(pipe)
    assert any(isinstance(block, gr.Video) for block in demo.blocks.values())
    ar_path, acc_path, ar_heat, acc_heat, summary = compare_videos(pipe, "b", list(METHODS)[0], 3, tmp_path)
    assert ar_path.endswith(".mp4") and acc_path.endswith(".mp4")
    assert ar_heat.size == acc_heat.size and ar_heat.width > 3 * ar_heat.height  # one heatmap per frame, side by side
    assert "AR" in summary and "forwards" in summary
    with pytest.raises(ValueError, match="unknown class 'zebra'"):
        compare_videos(pipe, "zebra", list(METHODS)[0], 0, tmp_path)
