"""The demo's LPD tab: one class and seed decoded by the raster model (AR, MC-SJD, ZipAR) and
by the LPD model in 20 or 32 forwards, side by side, with each one's commit-order heatmap:
LPD's groups spread over the grid, the raster methods' follow rows."""

from __future__ import annotations

import gradio as gr
import torch

from mmspec.apps.fields import seed_field, whole
from mmspec.apps.shipped import load_shipped
from mmspec.decoding.config import DecodingConfig
from mmspec.runs.batch import MAX_SEED
from mmspec.runs.placement import describe_placement
from mmspec.io.images import commit_heatmap

RASTER_METHODS = ("ar", "mc-sjd", "zipar+mc-sjd")
LPD_STEPS = ("20", "32")  # strings: what the radio shows, and what its API advertises and takes
TABLE_HEADERS = ["model", "decoding", "forwards", "time (s)", "x fewer forwards than raster AR"]


def compare_orders(raster, lpd, class_name: str, steps: int, seed: int):
    """The raster methods and LPD with `steps` on one class and seed: (gallery items,
    heatmap items, table rows)."""
    if class_name not in lpd.class_names:
        raise ValueError(f"unknown class {class_name!r}; choose from {', '.join(lpd.class_names)}")
    label = lpd.class_names.index(class_name)
    runs = [(raster, DecodingConfig.from_name(name), "raster") for name in RASTER_METHODS]
    runs.append((lpd, lpd.check_decoding(f"lpd-{steps}"), "LPD"))
    gallery, heatmaps, rows = [], [], []
    for pipe, decoding, model in runs:
        out = pipe(class_labels=[label], decoding=decoding, generator=torch.Generator().manual_seed(seed))
        stats = out.stats[0]
        title = f"{model}: {decoding.describe()}"
        gallery.append((out.images[0], title))
        heatmaps.append((commit_heatmap(stats.commit_iteration[0], pipe.token_grid), f"{title}: commit order"))
        rows.append([model, decoding.describe(), stats.forward_passes, round(stats.wall_time_s, 2), None])
    for row in rows:
        row[-1] = round(rows[0][2] / row[2], 1)
    return gallery, heatmaps, rows


def build_lpd_tab(raster=None, lpd=None, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
    """Lays out the tab inside the current `gr.Tab`; loads the shipped raster and LPD models
    (on `device`, in `dtype`) unless given."""
    from mmspec.assets import DEFAULT_ASSETS, LPD_ASSETS

    raster = raster or load_shipped(DEFAULT_ASSETS, device, dtype)
    lpd = lpd or load_shipped(LPD_ASSETS, device, dtype)
    for pipe in (raster, lpd):
        pipe.set_progress_bar_config(disable=True)
    gr.Markdown("Locality-aware parallel decoding: the LPD model decodes a group of spread-out cells per forward, "
                "each next to decoded context; the raster model decodes rows (ZipAR: several rows at once). "
                "Heatmaps: the forward that committed each token (dark = early, yellow = late).")
    with gr.Row():
        with gr.Column(scale=1):
            class_name = gr.Dropdown(lpd.class_names, value=lpd.class_names[0], label="class")
            steps = gr.Radio(list(LPD_STEPS), value=LPD_STEPS[0], label="LPD forwards per image")
            seed = seed_field()
            run = gr.Button("Generate", variant="primary")
            status = gr.Markdown("", label="status")
        with gr.Column(scale=2):
            images = gr.Gallery(label="images", columns=4, height="auto")
            heatmaps = gr.Gallery(label="commit order", columns=4, height="auto")
            table = gr.Dataframe(headers=TABLE_HEADERS, label="cost")

    def generate(class_name, steps, seed):
        try:
            seed = whole("seed", seed, 0, MAX_SEED)
            if str(steps) not in LPD_STEPS:
                raise ValueError(f"steps must be one of {', '.join(LPD_STEPS)}, got {steps!r}")
            gallery, maps, rows = compare_orders(raster, lpd, class_name, int(steps), seed)
        except ValueError as err:
            return [], [], [], f"**Cannot generate:** {err}"
        return gallery, maps, rows, f"Done: seed {seed}, {describe_placement(lpd)}."

    run.click(generate, [class_name, steps, seed], [images, heatmaps, table, status], api_name="generate_lpd")
