"""Gradio demo: the same seed decoded by AR and by accelerated methods, side by side.

Run `mmspec demo` (127.0.0.1:7860 by default, the shipped model) or
`mmspec demo --pipeline DIR --host 0.0.0.0 --port 8000`; any saved pipeline of any family
works. A raster image pipeline (LlamaGen, Emu3, Janus, Lumina-mGPT / Anole; class- or
prompt-conditioned) fills the Images tab; a pipeline of another family (captioner, mesh,
speech, video, LPD) fills its own tab, and the Images tab then shows the shipped image
model. The app only lays out widgets and calls the pipelines, through what each says of
itself (`condition_kind`, `class_names`, `token_grid`, ...).

Its API has one endpoint per action, each with named parameters and outputs: `/generate`
(images), `/generate_lpd`, `/caption` and `/draw_shapes`, `/generate_mesh`, `/speak` and
`/generate_video`; a text-to-speech pipeline's Speech tab has `/speak_text` instead of
`/speak`, a Cosmos-Predict1 pipeline's Video tab `/continue_video` instead of `/generate_video`:

    >>> from gradio_client import Client  # doctest: +SKIP
    >>> images, stats, heatmaps, status = Client("http://127.0.0.1:7860/").predict(  # doctest: +SKIP
    ...     condition="circle", methods=["mc-sjd"], seed="0", api_name="/generate")

Every request is bounded before any work (window, methods, prompt length), and the queue
runs two at a time: a request costs at most a few decodes of one image, so two requests
at their limits delay a normal one by seconds, not minutes.
"""

from __future__ import annotations

import dataclasses
import importlib
import math

import gradio as gr
import torch

from mmspec.runs.batch import MAX_SEED
from mmspec.decoding.auto import describe_choices
from mmspec.decoding.config import DECODINGS, DecodingConfig
from mmspec.decoding.names import parse_name
from mmspec.io.images import commit_heatmap
from mmspec.pipelines.checks import sampling_config

METHODS = [name for name in DECODINGS if name != "ar"]
DEFAULT_METHODS = ["auto", "mc-sjd", "zipar+mc-sjd"]
LEARNED = " + learned drafts"  # a method drafting with the pipeline's draft head, offered when it has one
LEARNED_METHODS = ["auto", "keyed", "mc-sjd"]
CHOSEN_BY_AUTO = ("window", "init", "branches")  # the sliders' values would fix what auto chooses
TABLE_HEADERS = ["method", "exact", "forwards", "tokens / forward", "time (s)", "x fewer forwards", "x faster",
                 "same tokens as AR"]
# one request decodes AR plus at most this many methods: five one-image decodes at most
MAX_METHODS = 4
# drafts per forward: 16-32 in the papers; on the shipped model no method is faster than
# AR past 64 (window 256 costs 2x to 7x AR's time), so larger windows only hold the queue
MAX_WINDOW = 64
MAX_LANTERN_K = 1000  # LANTERN's k; its neighbour table holds k entries per vocabulary token
MAX_GSD_RANK_WINDOW = 256  # GSD compares 2 x rank_window candidates per draft
MAX_PROMPT_CHARS = 500  # a prompt's prefill is part of every decode of the request
CONCURRENCY = 2  # requests decoded at once
# the other modalities' tabs: (title, module, function that lays out the tab's contents
# inside its `gr.Tab` and loads the modality's shipped pipeline unless given one, the
# pipeline classes it takes, and the keyword that gives it)
TABS: tuple[tuple[str, str, str, tuple[str, ...], str], ...] = (
    ("Captions", "mmspec.apps.caption_tab", "build_caption_tab", ("CaptioningPipeline",), "pipe"),
    ("Meshes", "mmspec.apps.mesh_tab", "build_mesh_tab", ("MeshPipeline",), "pipe"),
    ("Speech", "mmspec.apps.audio_tab", "build_speech_tab", ("SpeechPipeline", "OrpheusPipeline", "DiaPipeline"), "pipe"),
    ("Video", "mmspec.apps.video_tab", "build_video_tab", ("VideoPipeline", "CosmosPipeline"), "pipe"),
    ("LPD", "mmspec.apps.lpd_tab", "build_lpd_tab", ("LPDPipeline",), "lpd"),
)
# whole-number fields are read unrounded (no `precision=0`), so that `whole` refuses 2.5
# instead of Gradio rounding it to 2
QUEUE_SIZE = 16  # requests waiting beyond that are refused, not queued for ever


def whole(name: str, value, low: int, high: int | None = None) -> int:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value == int(value)
    if not ok or value < low or (high is not None and value > high):
        span = f">= {low}" if high is None else f"from {low} to {high}"
        raise ValueError(f"{name} must be a whole number {span}, got {value}")
    return int(value)


def fraction(name: str, value, high: float = 1.0) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= high:
        raise ValueError(f"{name} must be a number from 0 to {high:g}, got {value}")
    return float(value)


def methods_for(pipe) -> list[str]:
    """The methods the page offers: every decoding, and with a learned draft head, the exact
    ones that draft with it (the others run without it)."""
    return METHODS + ([m + LEARNED for m in LEARNED_METHODS] if getattr(pipe, "drafter", None) is not None else [])


def check_methods(methods, offered: list[str] = METHODS) -> list[str]:
    methods = list(methods or [])
    unknown = [m for m in methods if m not in offered]
    if unknown:
        raise ValueError(f"unknown method {unknown[0]!r}; choose from {', '.join(offered)}")
    if len(set(methods)) != len(methods):
        raise ValueError("methods lists a method twice")
    if len(methods) > MAX_METHODS:
        raise ValueError(f"compare at most {MAX_METHODS} methods with AR at once, got {len(methods)}")
    return methods


def check_condition(pipe, condition) -> dict:
    """The pipeline-call keyword for the page's class name or prompt."""
    if pipe.condition_kind == "class":
        if condition not in pipe.class_names:
            raise ValueError(f"unknown class {condition!r}; choose from {', '.join(pipe.class_names)}")
        return dict(class_labels=[pipe.class_names.index(condition)])
    if not isinstance(condition, str) or not condition.strip():
        raise ValueError("the prompt is empty")
    if len(condition) > MAX_PROMPT_CHARS:
        raise ValueError(f"the prompt has {len(condition)} characters; at most {MAX_PROMPT_CHARS}")
    return dict(prompt=condition)


def check_settings(pipe, seed, window, guidance_scale, temperature, top_k, top_p, zipar_window, lantern_k, lantern_delta,
                   gsd_rank_window, gsd_prob_gap, gsd_embed_dist) -> dict:
    """The page's settings, checked against the demo's limits and the model's; raises a
    one-line ValueError naming the first bad one."""
    try:
        seed_value = int(str(seed).strip())
    except ValueError:
        seed_value = -1
    if not 0 <= seed_value <= MAX_SEED:
        raise ValueError(f"seed must be a whole number from 0 to {MAX_SEED}, got {seed!r}")
    sampling = dict(guidance_scale=guidance_scale, temperature=temperature, top_k=whole("top_k", top_k, 0), top_p=top_p)
    sampling_config({}, **sampling)
    params = dict(
        window=whole("window", window, 1, min(MAX_WINDOW, pipe.sequence_length)),
        zipar_window=whole("zipar_window", zipar_window, 1),
        lantern_k=whole("lantern_k", lantern_k, 1, MAX_LANTERN_K),
        lantern_delta=fraction("lantern_delta", lantern_delta),
        gsd_rank_window=whole("gsd_rank_window", gsd_rank_window, 1, MAX_GSD_RANK_WINDOW),
        gsd_prob_gap=fraction("gsd_prob_gap", gsd_prob_gap),
        gsd_embed_dist=fraction("gsd_embed_dist", gsd_embed_dist, high=4.0),
    )
    return dict(seed=seed_value, sampling=sampling, params=params)


def compare(pipe, condition: dict, methods: list[str], settings: dict):
    """Decodes the condition with AR and each method from the same seed.

    Returns (gallery items, table rows, heatmap items)."""
    own = lambda name: {k: v for k, v in settings["params"].items() if not (parse_name(name).method == "auto" and k in CHOSEN_BY_AUTO)}
    names = ["ar", *methods]
    configs = [pipe.check_decoding(DecodingConfig.from_name(name.removesuffix(LEARNED), **own(name.removesuffix(LEARNED))))
               for name in names]
    configs = [dataclasses.replace(c, head=pipe.drafter) if name.endswith(LEARNED) else c for name, c in zip(names, configs)]
    gallery, rows, heatmaps = [], [], []
    baseline, ar_tokens = None, None
    for name, config in zip(names, configs):
        out = pipe(**condition, decoding=config, generator=torch.Generator().manual_seed(settings["seed"]), **settings["sampling"])
        stats = out.stats[0]
        baseline = baseline or stats
        ar_tokens = out.tokens if ar_tokens is None else ar_tokens
        gallery.append((out.images[0], name))
        chose = "" if stats.choices is None else f" (chose {describe_choices(stats.choices)})"
        heatmaps.append((commit_heatmap(stats.commit_iteration[0], pipe.token_grid), f"{name}: commit order{chose}"))
        rows.append([
            name, "yes" if stats.exact else "no", stats.forward_passes, round(stats.tokens_per_forward, 2),
            round(stats.wall_time_s, 2), round(baseline.forward_passes / stats.forward_passes, 2),
            round(baseline.wall_time_s / max(stats.wall_time_s, 1e-9), 2),
            "yes" if torch.equal(out.tokens, ar_tokens) else "no",
        ])
    return gallery, rows, heatmaps


def build_demo(pipe) -> gr.Blocks:
    """The app around `pipe`: in the Images tab when it is a raster image pipeline, else in
    its family's tab (the Images tab then shows the shipped image model)."""
    given = {title: (pipe, keyword) for title, _, _, classes, keyword in TABS if type(pipe).__name__ in classes}
    if given:
        from mmspec.assets import DEFAULT_ASSETS
        from mmspec.pipelines import load_pipeline

        pipe = load_pipeline(DEFAULT_ASSETS)
        pipe.set_progress_bar_config(disable=True)
    defaults = pipe.default_sampling
    pipe.use_drafter = False  # the page's methods draft with the head only where their name says so
    offered = methods_for(pipe)
    window_max = min(MAX_WINDOW, pipe.sequence_length)
    cols = pipe.token_grid[1]

    with gr.Blocks(title="mmspec: many tokens per forward") as demo:
        gr.Markdown(
            "# mmspec: parallel decoding, side by side\n"
            "The same seed decoded one token per forward (**AR**) and by the methods you tick. "
            "**auto** (and keyed) return AR's very image for the seed, token for token, in fewer forwards; "
            "SJD and MC-SJD sample the model's own distribution (another image); LANTERN, GSD and ZipAR trade "
            "a bounded change of it for fewer forwards. The heatmaps show when each token was committed "
            "(dark = early, yellow = late)."
        )
        with gr.Tab("Images"):
            with gr.Row():
                with gr.Column(scale=1):
                    if pipe.condition_kind == "class":
                        condition = gr.Dropdown(pipe.class_names, value=pipe.class_names[0], label="class")
                    else:
                        condition = gr.Textbox(label="prompt", value="a red apple on a table", max_length=MAX_PROMPT_CHARS)
                    default_methods = DEFAULT_METHODS + (["auto" + LEARNED] if len(offered) > len(METHODS) else [])
                    methods = gr.CheckboxGroup(offered, value=default_methods, label=f"methods to compare with AR (at most {MAX_METHODS})")
                    with gr.Row():
                        seed = gr.Textbox(value="0", label="seed", elem_id="seed")
                        window = gr.Number(value=min(16, window_max), label=f"window (drafts per forward, 1 to {window_max})")
                    with gr.Row():
                        guidance_scale = gr.Slider(0, 10, value=defaults["guidance_scale"], step=0.25, label="guidance scale")
                        temperature = gr.Slider(0, 2, value=defaults["temperature"], step=0.05, label="temperature (0 = greedy)")
                    with gr.Row():
                        top_k = gr.Number(value=defaults["top_k"], label="top-k (0 = all)")
                        top_p = gr.Slider(0.01, 1, value=defaults["top_p"], step=0.01, label="top-p (1 = all)")
                    with gr.Group(visible=True) as zipar_box:
                        zipar_window = gr.Number(value=min(8, cols), label=f"ZipAR window (tokens of the row above, 1 to {cols})")
                    with gr.Group(visible=False) as lantern_box:
                        lantern_k = gr.Number(value=MAX_LANTERN_K, label="LANTERN k (neighbours)")
                        lantern_delta = gr.Slider(0, 1, value=0.1, step=0.01, label="LANTERN delta (total-variation budget)")
                    with gr.Group(visible=False) as gsd_box:
                        gsd_rank_window = gr.Number(value=7, label="GSD rank half-width")
                        gsd_prob_gap = gr.Slider(0, 1, value=0.15, step=0.01, label="GSD probability gap")
                        gsd_embed_dist = gr.Slider(0, 4, value=0.5, step=0.05, label="GSD embedding distance")
                    run = gr.Button("Generate", variant="primary")
                    status = gr.Markdown("", label="status", elem_id="status")
                with gr.Column(scale=2):
                    images = gr.Gallery(label="images", columns=4, height="auto", elem_id="images")
                    stats = gr.Dataframe(headers=TABLE_HEADERS, label="stats", elem_id="stats")
                    heatmaps = gr.Gallery(label="heatmaps", columns=4, height="auto", elem_id="heatmaps")

            def toggle(selected):
                selected = selected or []
                return (
                    gr.update(visible=any("zipar" in m for m in selected)),
                    gr.update(visible=any("lantern" in m for m in selected)),
                    gr.update(visible=any("gsd" in m for m in selected)),
                )

            methods.change(toggle, methods, [zipar_box, lantern_box, gsd_box], api_name=False, queue=False)

            def generate(condition, methods, seed, window, guidance_scale, temperature, top_k, top_p, zipar_window,
                         lantern_k, lantern_delta, gsd_rank_window, gsd_prob_gap, gsd_embed_dist):
                """AR and the chosen methods from one seed: images, a cost table, commit-order heatmaps and a status line."""
                try:
                    call = check_condition(pipe, condition)
                    chosen = check_methods(methods, offered)
                    settings = check_settings(pipe, seed, window, guidance_scale, temperature, top_k, top_p, zipar_window,
                                              lantern_k, lantern_delta, gsd_rank_window, gsd_prob_gap, gsd_embed_dist)
                    gallery, rows, maps = compare(pipe, call, chosen, settings)
                except ValueError as err:
                    return [], [], [], f"**Cannot generate:** {err}"
                return gallery, rows, maps, f"Done: AR and {len(rows) - 1} method(s) from seed {settings['seed']}."

            run.click(
                generate,
                [condition, methods, seed, window, guidance_scale, temperature, top_k, top_p, zipar_window,
                 lantern_k, lantern_delta, gsd_rank_window, gsd_prob_gap, gsd_embed_dist],
                [images, stats, heatmaps, status],
                api_name="generate",
            )
        for title, module, builder, _, _ in TABS:
            with gr.Tab(title):
                tab_pipe, keyword = given.get(title, (None, None))
                getattr(importlib.import_module(module), builder)(**({keyword: tab_pipe} if tab_pipe is not None else {}))
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=QUEUE_SIZE)
    return demo


def launch(pipe, host: str = "127.0.0.1", port: int = 7860, block: bool = True):
    demo = build_demo(pipe)
    demo.launch(server_name=host, server_port=port, share=False, prevent_thread_lock=not block)
    return demo
