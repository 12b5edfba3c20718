"""The Video tab for a Cosmos-Predict1 pipeline (video to world): the first frames of an
uploaded video continued by AR and by an accelerated method from the same seed, side by side
as MP4s, with the cost of each and the forward that committed each token of the generated
latent frames.

`build_video_tab` lays this out when the app is given a `CosmosPipeline` (`mmspec demo
--pipeline DIR`). Its endpoint is `/continue_video` (`video`, `input_frames`, `method`, `seed`
-> `ar_video`, `fast_video`, `stats`, `ar_heat`, `fast_heat`, `status`). A video it cannot
take (unreadable, frames not the model's size, fewer frames than asked for) is refused in one
line through `gr.Error`.

The upload is decoded (`mmspec.io.video.read_video`, PyAV) only as far as the conditioning
frames it needs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import gradio as gr
import numpy as np
import torch

from mmspec.apps.clip_pair import cost_row
from mmspec.apps.demo import TABLE_HEADERS
from mmspec.apps.fields import refusal, seed_field, whole
from mmspec.apps.video_methods import METHODS as CLASS_VIDEO_METHODS
from mmspec.apps.video_methods import method_config
from mmspec.decoding.config import DecodingConfig
from mmspec.io.video import check_format, frame_heatmaps, read_video
from mmspec.runs.batch import MAX_SEED
from mmspec.runs.placement import describe_placement

# accelerated methods offered, by label: (decoding name, first drafts, frame schedule rows);
# those the pipeline refuses (a ZipAR window longer than its rows, ...) are left out
METHODS = {"auto (AR's video in fewer forwards)": ("auto", None, None), **CLASS_VIDEO_METHODS}
SHOWN_SIZE = 256  # frames smaller than this are shown upscaled to about it


def fast_methods(pipe) -> dict[str, DecodingConfig]:
    """The accelerated methods the pipeline takes, by label."""
    methods = {}
    for label in METHODS:
        try:
            methods[label] = pipe.check_decoding(method_config(label, METHODS, zipar_window=max(1, pipe.frame_grid[1] // 2)))
        except ValueError:
            continue
    return methods


def conditioning_frames(pipe, path, num_input_frames: int) -> np.ndarray:
    """The first `num_input_frames` frames of the upload at `path`, uint8 `[F, H, W, 3]`,
    refused in one line unless they are the pipeline's size and there are enough of them."""
    if not path:
        raise ValueError("upload a video to continue")
    try:
        frames = read_video(path, num_input_frames)
    except ValueError as err:  # named by the upload's name, not the server's copy of it
        raise ValueError(str(err).replace(str(path), Path(path).name)) from None
    height, width = pipe.frame_size
    if frames.shape[1:3] != (height, width):
        raise ValueError(f"this model continues videos of {height} x {width} pixels (height x width); the upload's frames are "
                         f"{frames.shape[1]} x {frames.shape[2]}: resize it first")
    if len(frames) < num_input_frames:
        raise ValueError(f"the upload has {len(frames)} frame(s), fewer than the {num_input_frames} input frames chosen")
    return frames


def continue_both(pipe, frames: np.ndarray, num_input_frames: int, method: str, seed: int, out_dir: Path):
    """AR and `method` (a label of `fast_methods(pipe)`) continue `frames` from one seed:
    (AR mp4, accelerated mp4, cost table rows, AR heatmaps, accelerated heatmaps, a Markdown cost line)."""
    check_format("mp4")
    methods = fast_methods(pipe)
    if method not in methods:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(methods)}")
    given = pipe.check_input_frames(num_input_frames)
    generated = pipe.latent_shape[0] - pipe.tokenizer.latent_shape(given, *pipe.frame_size)[0]
    scale = max(1, SHOWN_SIZE // max(pipe.frame_size))
    outputs, rows, baseline, ar_tokens = [], [], None, None
    for name, config in (("ar", DecodingConfig.from_name("ar")), ("accelerated", methods[method])):
        out = pipe(frames, num_input_frames=given, decoding=config, generator=torch.Generator().manual_seed(seed))
        stats = out.stats[0]
        baseline = baseline or stats
        ar_tokens = out.tokens if ar_tokens is None else ar_tokens
        path = pipe.save_video(out.videos[0], out_dir / f"{name}_{seed}.mp4", scale=scale)
        outputs.append((str(path), frame_heatmaps(stats.commit_iteration[0], generated, pipe.frame_grid), stats))
        rows.append(cost_row(config.describe(), stats, baseline, torch.equal(out.tokens, ar_tokens)))
    (ar_path, ar_heat, ar), (fast_path, fast_heat, fast) = outputs
    same = "the very same video as AR's, token for token" if rows[1][-1] == "yes" else \
        "another sample (SJD and MC-SJD sample AR's distribution; relaxed methods change it)"
    summary = (f"**AR**: {ar.forward_passes} forwards, {ar.wall_time_s:.1f} s. **{method}**: {fast.forward_passes} forwards "
               f"({ar.forward_passes / fast.forward_passes:.1f}x fewer), {fast.wall_time_s:.1f} s, {describe_placement(pipe)}. "
               f"Same seed ({seed}): {same}.")
    return ar_path, fast_path, rows, ar_heat, fast_heat, summary


def build_cosmos_tab(pipe) -> None:
    """Lays out the tab for a Cosmos-Predict1 pipeline inside the current `gr.Tab`."""
    pipe.set_progress_bar_config(disable=True)
    methods = list(fast_methods(pipe))
    choices = [str(n) for n in pipe.input_frame_choices]  # strings: what the radio shows, and what its API advertises and takes
    out_dir = Path(tempfile.mkdtemp(prefix="mmspec-cosmos-"))
    height, width = pipe.frame_size
    gr.Markdown(f"{type(pipe).__name__} continues a video ({height} x {width} frames) to {pipe.num_frames} frames: "
                "the first frames condition, the model writes the rest token by token. auto and keyed return AR's very "
                "video for the seed in fewer forwards; SJD and MC-SJD sample AR's distribution. The heatmaps give "
                "each generated token's commit forward, latent frame by latent frame (dark = early, yellow = late).")
    with gr.Row():
        with gr.Column(scale=1):
            video = gr.Video(label=f"video to continue ({height} x {width} frames)", sources=["upload"])
            input_frames = gr.Radio(choices, value="9" if "9" in choices else choices[0], label="input frames")
            method = gr.Dropdown(methods, value=methods[0], label="accelerated method")
            seed = seed_field()
            run = gr.Button("Continue", variant="primary")
            status = gr.Markdown("", label="status")
        with gr.Column(scale=2):
            with gr.Row():
                ar_video = gr.Video(label="AR", autoplay=True, loop=True)
                fast_video = gr.Video(label="accelerated", autoplay=True, loop=True)
            stats = gr.Dataframe(headers=TABLE_HEADERS, label="stats")
            ar_heat = gr.Image(label="AR: commit forward per latent frame", type="pil")
            fast_heat = gr.Image(label="accelerated: commit forward per latent frame", type="pil")

    def continue_video(video, input_frames, method, seed):
        """AR and the accelerated method continue the video from one seed: two videos, a cost table,
        two heatmap strips and a status line."""
        try:
            if str(input_frames) not in choices:
                raise ValueError(f"input_frames must be one of {', '.join(choices)}, got {input_frames!r}")
            seed_value = whole("seed", seed, 0, MAX_SEED)
            if method not in methods:
                raise ValueError(f"unknown method {method!r}; choose from {', '.join(methods)}")
            frames = conditioning_frames(pipe, video, int(input_frames))
            ar, fast, rows, ar_map, fast_map, summary = continue_both(
                pipe, frames, int(input_frames), method, seed_value, Path(tempfile.mkdtemp(dir=out_dir)))
        except ValueError as err:
            raise refusal(f"Cannot continue the video: {err}") from None
        return ar, fast, rows, ar_map, fast_map, summary

    run.click(continue_video, [video, input_frames, method, seed], [ar_video, fast_video, stats, ar_heat, fast_heat, status],
              api_name="continue_video")
