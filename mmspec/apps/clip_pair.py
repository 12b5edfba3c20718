"""What both speech pages show: AR's clip beside an accelerated one from the same seed, a
cost table and the forward that committed each token."""

from __future__ import annotations

from collections.abc import Callable

import gradio as gr
import torch

from mmspec.apps.demo import TABLE_HEADERS
from mmspec.apps.token_match import same_tokens_line
from mmspec.io.audio import as_gradio_audio
from mmspec.io.images import commit_heatmap


def side_by_side(say: Callable, configs: tuple, commit_grid: Callable[[torch.Tensor], torch.Tensor], what: str):
    """`say(config)` runs the pipeline for each decoding config (AR first) from one seed;
    returns the two clips, the cost table, a heatmap per config of `commit_grid(its
    commit_iteration)`, titled by `what` a cell is, and the line saying whether the
    accelerated clip has AR's very tokens."""
    clips, rows, maps, baseline, ar_tokens, results = [], [], [], None, None, []
    for config in configs:
        out = say(config)
        stats = out.stats[0]
        baseline = baseline or stats
        ar_tokens = out.tokens if ar_tokens is None else ar_tokens
        results.append((config.describe(), out.tokens))
        clips.append(as_gradio_audio(out.audios[0], out.sample_rate))
        grid = commit_grid(stats.commit_iteration[0])
        maps.append((commit_heatmap(grid.flatten(), tuple(grid.shape), size=480), f"{config.describe()}: commit forward per {what}"))
        rows.append(cost_row(config.describe(), stats, baseline, torch.equal(out.tokens, ar_tokens)))
    return clips[0], clips[1], rows, maps, same_tokens_line(ar_tokens, results[1:])


def cost_row(name: str, stats, baseline, same_tokens: bool) -> list:
    """One row of `TABLE_HEADERS`: a decode's `stats` against AR's (`baseline`) from the same seed."""
    return [name, "yes" if stats.exact else "no", stats.forward_passes, round(stats.tokens_per_forward, 2),
            round(stats.wall_time_s, 2), round(baseline.forward_passes / stats.forward_passes, 2),
            round(baseline.wall_time_s / max(stats.wall_time_s, 1e-9), 2), "yes" if same_tokens else "no"]


def clip_pair_column(heatmap_label: str) -> tuple:
    """The output column: AR's clip and the accelerated one, the cost table, the heatmaps."""
    with gr.Column(scale=2):
        with gr.Row():
            ar_audio = gr.Audio(label="AR", type="numpy")
            fast_audio = gr.Audio(label="accelerated", type="numpy")
        stats = gr.Dataframe(headers=TABLE_HEADERS, label="stats")
        heatmaps = gr.Gallery(label=heatmap_label, columns=1, height="auto")
    return ar_audio, fast_audio, stats, heatmaps
