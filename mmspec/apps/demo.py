"""Gradio demo: the same seed decoded by AR and by accelerated methods, side by side.

Run `mmspec demo` (127.0.0.1:7860 by default, the shipped model) or
`mmspec demo --pipeline DIR --host 0.0.0.0 --port 8000`. The app only lays out widgets
and calls the pipeline.
"""

from __future__ import annotations

import gradio as gr
import torch

from mmspec.decoding.config import DECODINGS, DecodingConfig
from mmspec.images import commit_heatmap

METHODS = [name for name in DECODINGS if name != "ar"]
DEFAULT_METHODS = ["sjd", "mc-sjd", "zipar+mc-sjd"]
TABLE_HEADERS = ["method", "exact", "forwards", "tokens / forward", "time (s)", "x fewer forwards", "x faster"]


def parse_settings(seed: str, window, top_k, temperature, guidance_scale, zipar_window, lantern_k, lantern_delta,
                   gsd_rank_window, gsd_prob_gap, gsd_embed_dist) -> dict:
    """Checks the page's settings; raises ValueError with a readable message."""
    try:
        seed_value = int(str(seed).strip())
    except ValueError:
        raise ValueError(f"seed must be a whole number, got {seed!r}") from None

    def whole(name, value, low):
        if value is None or float(value) != int(value) or int(value) < low:
            raise ValueError(f"{name} must be a whole number >= {low}, got {value}")
        return int(value)

    return dict(
        seed=seed_value,
        window=whole("window", window, 1),
        top_k=whole("top-k", top_k, 0),
        zipar_window=whole("ZipAR window", zipar_window, 1),
        lantern_k=whole("LANTERN k", lantern_k, 1),
        gsd_rank_window=whole("GSD rank window", gsd_rank_window, 1),
        temperature=float(temperature),
        guidance_scale=float(guidance_scale),
        lantern_delta=float(lantern_delta),
        gsd_prob_gap=float(gsd_prob_gap),
        gsd_embed_dist=float(gsd_embed_dist),
    )


def compare(pipe, condition: dict, methods: list[str], settings: dict):
    """Decodes the condition with AR and each method from the same seed.

    Returns (gallery items, table rows, heatmap items)."""
    sampling = dict(guidance_scale=settings["guidance_scale"], temperature=settings["temperature"], top_k=settings["top_k"])
    params = {k: settings[k] for k in ("window", "zipar_window", "lantern_k", "lantern_delta", "gsd_rank_window", "gsd_prob_gap", "gsd_embed_dist")}
    gallery, rows, heatmaps = [], [], []
    grid = pipe.transformer.layout().grid
    baseline = None
    for name in ["ar", *methods]:
        config = DecodingConfig.from_name(name, **params)
        out = pipe(**condition, decoding=config, generator=torch.Generator().manual_seed(settings["seed"]), **sampling)
        stats = out.stats[0]
        baseline = baseline or stats
        gallery.append((out.images[0], name))
        heatmaps.append((commit_heatmap(stats.commit_iteration[0], grid), f"{name}: commit order"))
        rows.append([
            name, "yes" if stats.exact else "no", stats.forward_passes, round(stats.tokens_per_forward, 2),
            round(stats.wall_time_s, 2), round(baseline.forward_passes / stats.forward_passes, 2),
            round(baseline.wall_time_s / max(stats.wall_time_s, 1e-9), 2),
        ])
    return gallery, rows, heatmaps


def build_demo(pipe) -> gr.Blocks:
    class_conditional = pipe.transformer.config.model_type == "c2i"
    names = pipe.class_names or [str(i) for i in range(pipe.transformer.config.num_classes)]
    defaults = {**dict(guidance_scale=4.0, top_k=2000, temperature=1.0), **pipe.default_sampling}

    with gr.Blocks(title="mmspec: many tokens per forward") as demo:
        gr.Markdown(
            "# mmspec: parallel decoding, side by side\n"
            "The same seed decoded one token per forward (**AR**) and by the methods you tick. "
            "Exact methods (SJD, MC-SJD) sample the model's own distribution; LANTERN, GSD and ZipAR trade "
            "a bounded change of it for fewer forwards. The heatmaps show when each token was committed "
            "(dark = early, yellow = late)."
        )
        with gr.Row():
            with gr.Column(scale=1):
                if class_conditional:
                    condition = gr.Dropdown(names, value=names[0], label="class")
                else:
                    condition = gr.Textbox(label="prompt", value="a red apple on a table")
                methods = gr.CheckboxGroup(METHODS, value=DEFAULT_METHODS, label="methods to compare with AR")
                with gr.Row():
                    seed = gr.Textbox(value="0", label="seed", elem_id="seed")
                    window = gr.Number(value=16, label="window (drafts per forward)", precision=0)
                with gr.Row():
                    guidance = gr.Slider(0, 10, value=defaults["guidance_scale"], step=0.25, label="guidance scale")
                    temperature = gr.Slider(0, 2, value=defaults["temperature"], step=0.05, label="temperature (0 = greedy)")
                top_k = gr.Number(value=defaults["top_k"], label="top-k (0 = all)", precision=0)
                with gr.Group(visible=True) as zipar_box:
                    zipar_window = gr.Number(value=8, label="ZipAR window (tokens of the row above)", precision=0)
                with gr.Group(visible=False) as lantern_box:
                    lantern_k = gr.Number(value=1000, label="LANTERN k (neighbours)", precision=0)
                    lantern_delta = gr.Slider(0, 1, value=0.1, step=0.01, label="LANTERN delta (total-variation budget)")
                with gr.Group(visible=False) as gsd_box:
                    gsd_rank = gr.Number(value=7, label="GSD rank half-width", precision=0)
                    gsd_gap = gr.Slider(0, 1, value=0.15, step=0.01, label="GSD probability gap")
                    gsd_dist = gr.Slider(0, 4, value=0.5, step=0.05, label="GSD embedding distance")
                run = gr.Button("Generate", variant="primary")
                status = gr.Markdown("", elem_id="status")
            with gr.Column(scale=2):
                images = gr.Gallery(label="images", columns=4, height="auto", elem_id="images")
                table = gr.Dataframe(headers=TABLE_HEADERS, label="cost per image", elem_id="stats")
                heatmaps = gr.Gallery(label="commit order", columns=4, height="auto", elem_id="heatmaps")

        def toggle(selected):
            selected = selected or []
            return (
                gr.update(visible=any("zipar" in m for m in selected)),
                gr.update(visible=any("lantern" in m for m in selected)),
                gr.update(visible=any("gsd" in m for m in selected)),
            )

        methods.change(toggle, methods, [zipar_box, lantern_box, gsd_box])

        def on_generate(cond, chosen, seed_text, window_v, guidance_v, temperature_v, top_k_v, zipar_v, lk, ld, gr_, gg, gd):
            try:
                settings = parse_settings(seed_text, window_v, top_k_v, temperature_v, guidance_v, zipar_v, lk, ld, gr_, gg, gd)
                condition_kwargs = dict(class_labels=[names.index(cond)]) if class_conditional else dict(prompt=cond)
                gallery, rows, maps = compare(pipe, condition_kwargs, list(chosen or []), settings)
            except ValueError as err:
                return [], [], [], f"**Cannot generate:** {err}"
            return gallery, rows, maps, f"Done: AR and {len(rows) - 1} method(s) from seed {settings['seed']}."

        run.click(
            on_generate,
            [condition, methods, seed, window, guidance, temperature, top_k, zipar_window, lantern_k, lantern_delta, gsd_rank, gsd_gap, gsd_dist],
            [images, table, heatmaps, status],
            api_name="generate",
        )
    demo.queue(default_concurrency_limit=2)
    return demo


def launch(pipe, host: str = "127.0.0.1", port: int = 7860, block: bool = True):
    demo = build_demo(pipe)
    demo.launch(server_name=host, server_port=port, share=False, prevent_thread_lock=not block)
    return demo
