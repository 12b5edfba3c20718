"""The demo's Video tab: one class and seed decoded by AR and by an accelerated method, side by
side as MP4s (`gr.Video`), with the forward that committed each token drawn frame by frame.
Given a Cosmos-Predict1 pipeline (video to world), the tab is `mmspec.apps.cosmos_tab`'s instead.

Its endpoint is `/generate_video` (`class_name`, `method`, `seed` -> `ar_video`, `acc_video`,
`ar_heat`, `acc_heat`, `status`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import gradio as gr
import torch

from mmspec.apps.fields import seed_field, whole
from mmspec.apps.shipped import load_shipped
from mmspec.apps.video_methods import METHODS, method_config
from mmspec.decoding.config import DecodingConfig
from mmspec.io.video import check_format, frame_heatmaps
from mmspec.runs.batch import MAX_SEED
from mmspec.runs.placement import describe_placement

VIDEO_SCALE = 8  # 32x32 frames shown at 256x256


def compare_videos(pipe, class_name: str, method: str, seed: int, out_dir: Path):
    """AR and `method` on one class and seed: (AR mp4, accelerated mp4, AR heatmaps,
    accelerated heatmaps, a Markdown cost line)."""
    check_format("mp4")
    label = pipe.class_label(class_name)
    outputs = []
    for name, config in (("ar", DecodingConfig.from_name("ar")), ("accelerated", method_config(method))):
        out = pipe([label], decoding=config, generator=torch.Generator().manual_seed(seed))
        path = pipe.save_video(out.videos[0], out_dir / f"{name}_{seed}.mp4", scale=VIDEO_SCALE)
        heat = frame_heatmaps(out.stats[0].commit_iteration[0], pipe.num_frames, pipe.frame_grid)
        outputs.append((str(path), heat, out.stats[0], out.tokens))
    (ar_path, ar_heat, ar, _), (acc_path, acc_heat, acc, _) = outputs
    same = "the very same video as AR's, token for token" if torch.equal(outputs[0][3], outputs[1][3]) else \
        "another sample (SJD and MC-SJD sample AR's distribution; relaxed methods change it)"
    summary = (f"**AR**: {ar.forward_passes} forwards, {ar.wall_time_s:.1f} s. **{method}**: {acc.forward_passes} forwards "
               f"({ar.forward_passes / acc.forward_passes:.1f}x fewer), {acc.wall_time_s:.1f} s, {describe_placement(pipe)}. "
               f"Same seed ({seed}): {same}.")
    return ar_path, acc_path, ar_heat, acc_heat, summary


def build_video_tab(pipe=None, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
    """Lays out the tab inside the current `gr.Tab`; loads the shipped video model (on
    `device`, in `dtype`) unless given one (a Cosmos-Predict1 pipeline, which continues a
    video, gets `build_cosmos_tab`'s page)."""
    if getattr(pipe, "condition_kind", None) == "video":
        from mmspec.apps.cosmos_tab import build_cosmos_tab

        return build_cosmos_tab(pipe)
    if pipe is None:
        from mmspec.assets import VIDEO_ASSETS

        pipe = load_shipped(VIDEO_ASSETS, device, dtype)
    pipe.set_progress_bar_config(disable=True)
    out_dir = Path(tempfile.mkdtemp(prefix="mmspec-video-"))
    gr.Markdown("A class-conditional video model (8 frames of 8x8 tokens). AR decodes one token per forward; the "
                "heatmaps give each token's commit forward, frame by frame, on one scale (dark = early, yellow = late).")
    with gr.Row():
        with gr.Column(scale=1):
            class_name = gr.Dropdown(pipe.class_names, value=pipe.class_names[0], label="class")
            method = gr.Dropdown(list(METHODS), value=next(iter(METHODS)), label="accelerated method")
            seed = seed_field()
            run = gr.Button("Generate", variant="primary")
            status = gr.Markdown("", label="status")
        with gr.Column(scale=2):
            with gr.Row():
                ar_video = gr.Video(label="AR", autoplay=True, loop=True)
                acc_video = gr.Video(label="accelerated", autoplay=True, loop=True)
            ar_heat = gr.Image(label="AR: commit forward per frame", type="pil")
            acc_heat = gr.Image(label="accelerated: commit forward per frame", type="pil")

    def generate(class_name, method, seed):
        """AR and the chosen method from one seed: two videos, two heatmap strips and a cost line."""
        try:
            return compare_videos(pipe, class_name, method, whole("seed", seed, 0, MAX_SEED), out_dir)
        except ValueError as err:
            return None, None, None, None, f"**Cannot generate:** {err}"

    run.click(generate, [class_name, method, seed], [ar_video, acc_video, ar_heat, acc_heat, status], api_name="generate_video")
