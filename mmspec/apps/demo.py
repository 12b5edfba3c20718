"""Gradio demo: the same seed decoded by AR and by accelerated methods, side by side.

Run `mmspec demo` (127.0.0.1:7860 by default, the shipped model) or
`mmspec demo --pipeline DIR --host 0.0.0.0 --port 8000`; any saved pipeline of any family
works. A raster image pipeline (LlamaGen, Emu3, Janus, Lumina-mGPT / Anole; class- or
prompt-conditioned) fills the Images tab; a pipeline of another family (captioner, mesh,
speech, video, LPD) fills its own tab, and the Images tab then shows the shipped image
model. The app only lays out widgets and calls the pipelines, through what each says of
itself (`condition_kind`, `class_names`, `token_grid`, ...). Every shipped model a tab loads
goes where the given pipeline runs, in its dtype (`mmspec demo --device cuda`: all on the
GPU), and every status line says where that is ("... on cuda:0 in bfloat16.").

Its API has one endpoint per action, each with named parameters and outputs: `/generate`
(images), `/generate_lpd`, `/caption` and `/draw_shapes`, `/generate_mesh`, `/speak` and
`/generate_video`; a text-to-speech pipeline's Speech tab has `/speak_text` instead of
`/speak`, a Cosmos-Predict1 pipeline's Video tab `/continue_video` instead of `/generate_video`.
The Images tab composes each method from one control per choice of the decoding grammar
(`mmspec.apps.method_picker`); `/generate` takes up to four such methods ("auto",
"zipar+mc-sjd+gsd", "mc-sjd+above, window 8") and returns, beside the images, one line
saying which gave AR's very tokens:

    >>> from gradio_client import Client  # doctest: +SKIP
    >>> images, stats, heatmaps, same_tokens, status = Client("http://127.0.0.1:7860/").predict(  # doctest: +SKIP
    ...     condition="circle", methods=["auto", "mc-sjd"], seed=0, api_name="/generate")

A seed is a whole number in every endpoint; a number field refuses a string, null, NaN or
infinity in one line (`mmspec.apps.fields`). Every request is bounded before any work
(window, branches, methods, prompt length, an upload's pixels), and the queue
runs two at a time: a request costs at most a few decodes of one image, so two requests
at their limits delay a normal one by seconds, not minutes.
"""

from __future__ import annotations

import importlib

import gradio as gr
import torch

from mmspec.apps.fields import fraction, guard_numbers, seed_field, whole
from mmspec.apps.method_picker import build_picker, check_entries
from mmspec.apps.shipped import load_shipped
from mmspec.apps.token_match import same_tokens_line
from mmspec.decoding.auto import describe_choices
from mmspec.io.images import commit_heatmap
from mmspec.pipelines.checks import sampling_config
from mmspec.runs.batch import MAX_SEED
from mmspec.runs.placement import describe_placement

TABLE_HEADERS = ["method", "exact", "forwards", "tokens / forward", "time (s)", "x fewer forwards", "x faster",
                 "same tokens as AR"]
MAX_LANTERN_K = 1000  # LANTERN's k; its neighbour table holds k entries per vocabulary token
MAX_GSD_RANK_WINDOW = 256  # GSD compares 2 x rank_window candidates per draft
MAX_PROMPT_CHARS = 500  # a prompt's prefill is part of every decode of the request
CONCURRENCY = 2  # requests decoded at once
# the other modalities' tabs: (title, module, function that lays out the tab's contents
# inside its `gr.Tab` and loads the modality's shipped pipeline unless given one, on the
# `device` and in the `dtype` it is given; the pipeline classes it takes, and the keyword
# that gives it)
TABS: tuple[tuple[str, str, str, tuple[str, ...], str], ...] = (
    ("Captions", "mmspec.apps.caption_tab", "build_caption_tab", ("CaptioningPipeline",), "pipe"),
    ("Meshes", "mmspec.apps.mesh_tab", "build_mesh_tab", ("MeshPipeline",), "pipe"),
    ("Speech", "mmspec.apps.audio_tab", "build_speech_tab", ("SpeechPipeline", "OrpheusPipeline", "DiaPipeline"), "pipe"),
    ("Video", "mmspec.apps.video_tab", "build_video_tab", ("VideoPipeline", "CosmosPipeline"), "pipe"),
    ("LPD", "mmspec.apps.lpd_tab", "build_lpd_tab", ("LPDPipeline",), "lpd"),
)
# whole-number fields (but seeds) are read unrounded (no `precision=0`), so that `whole`
# refuses 2.5 instead of Gradio rounding it to 2; a seed's field refuses it itself
QUEUE_SIZE = 16  # requests waiting beyond that are refused, not queued for ever


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


def check_settings(pipe, seed, guidance_scale, temperature, top_k, top_p, zipar_window, lantern_k, lantern_delta,
                   gsd_rank_window, gsd_prob_gap, gsd_embed_dist) -> dict:
    """The page's settings, checked against the demo's limits and the model's: the seed, the
    sampling keywords and `params`, the rule and ZipAR parameters every method of the
    request takes (`DecodingConfig.from_name`'s keywords); raises a one-line ValueError
    naming the first bad one."""
    sampling = dict(guidance_scale=guidance_scale, temperature=temperature, top_k=whole("top_k", top_k, 0), top_p=top_p)
    sampling_config({}, **sampling)
    params = dict(
        zipar_window=whole("zipar_window", zipar_window, 1),
        lantern_k=whole("lantern_k", lantern_k, 1, MAX_LANTERN_K),
        lantern_delta=fraction("lantern_delta", lantern_delta),
        gsd_rank_window=whole("gsd_rank_window", gsd_rank_window, 1, MAX_GSD_RANK_WINDOW),
        gsd_prob_gap=fraction("gsd_prob_gap", gsd_prob_gap),
        gsd_embed_dist=fraction("gsd_embed_dist", gsd_embed_dist, high=4.0),
    )
    return dict(seed=whole("seed", seed, 0, MAX_SEED), sampling=sampling, params=params)


def compare(pipe, condition: dict, methods: list[str], settings: dict):
    """Decodes the condition with AR and each method (entries of `mmspec.apps.method_picker`)
    from the same seed.

    Returns (gallery items, table rows, heatmap items, the line saying which methods gave
    AR's very tokens)."""
    names = ["ar", *methods]
    configs = [pipe.check_decoding("ar"), *check_entries(pipe, methods, settings["params"])]
    gallery, rows, heatmaps, results = [], [], [], []
    baseline, ar_tokens = None, None
    for name, config in zip(names, configs):
        out = pipe(**condition, decoding=config, generator=torch.Generator().manual_seed(settings["seed"]), **settings["sampling"])
        stats = out.stats[0]
        baseline = baseline or stats
        ar_tokens = out.tokens if ar_tokens is None else ar_tokens
        results.append((name, out.tokens))
        gallery.append((out.images[0], name))
        chose = "" if stats.choices is None else f" (chose {describe_choices(stats.choices)})"
        heatmaps.append((commit_heatmap(stats.commit_iteration[0], pipe.token_grid), f"{name}: commit order{chose}"))
        rows.append([
            name, "yes" if stats.exact else "no", stats.forward_passes, round(stats.tokens_per_forward, 2),
            round(stats.wall_time_s, 2), round(baseline.forward_passes / stats.forward_passes, 2),
            round(baseline.wall_time_s / max(stats.wall_time_s, 1e-9), 2),
            "yes" if torch.equal(out.tokens, ar_tokens) else "no",
        ])
    return gallery, rows, heatmaps, same_tokens_line(ar_tokens, results[1:])


def build_demo(pipe) -> gr.Blocks:
    """The app around `pipe`: in the Images tab when it is a raster image pipeline, else in
    its family's tab (the Images tab then shows the shipped image model). The shipped models
    the other tabs show load on `pipe`'s device, in its dtype."""
    where = dict(device=pipe.device, dtype=pipe.dtype)
    given = {title: (pipe, keyword) for title, _, _, classes, keyword in TABS if type(pipe).__name__ in classes}
    if given:
        from mmspec.assets import DEFAULT_ASSETS

        pipe = load_shipped(DEFAULT_ASSETS, **where)
    defaults = pipe.default_sampling
    pipe.use_drafter = False  # the page's methods draft with the head only where their entry says so
    cols = pipe.token_grid[1]
    rule_defaults = dict(zipar_window=min(8, cols), lantern_k=MAX_LANTERN_K, lantern_delta=0.1, gsd_rank_window=7,
                         gsd_prob_gap=0.15, gsd_embed_dist=0.5)

    with gr.Blocks(title="mmspec: many tokens per forward") as demo:
        gr.Markdown(
            "# mmspec: parallel decoding, side by side\n"
            "The same seed decoded one token per forward (**AR**) and by up to four methods you compose. "
            "**auto** and **keyed** return AR's very image for the seed, token for token, in fewer forwards; "
            "SJD and MC-SJD sample the model's own distribution (another image); LANTERN, GSD, PCG and ZipAR trade "
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
                    methods = build_picker(pipe, rule_defaults)
                    with gr.Row():
                        seed = seed_field(elem_id="seed")
                        top_k = gr.Number(value=defaults["top_k"], label="top-k (0 = all)")
                    with gr.Row():
                        guidance_scale = gr.Slider(0, 10, value=defaults["guidance_scale"], step=0.25, label="guidance scale")
                        temperature = gr.Slider(0, 2, value=defaults["temperature"], step=0.05, label="temperature (0 = greedy)")
                    top_p = gr.Slider(0.01, 1, value=defaults["top_p"], step=0.01, label="top-p (1 = all)")
                    with gr.Accordion("ZipAR and relaxed-rule parameters", open=False, visible=True) as params_box:
                        with gr.Group(visible=True) as zipar_box:
                            zipar_window = gr.Number(value=rule_defaults["zipar_window"],
                                                     label=f"ZipAR window (tokens of the row above, 1 to {cols})")
                        with gr.Group(visible=False) as lantern_box:
                            lantern_k = gr.Number(value=rule_defaults["lantern_k"], label="LANTERN k (neighbours)")
                            lantern_delta = gr.Slider(0, 1, value=rule_defaults["lantern_delta"], step=0.01,
                                                      label="LANTERN delta (total-variation budget)")
                        with gr.Group(visible=False) as gsd_box:
                            gsd_rank_window = gr.Number(value=rule_defaults["gsd_rank_window"], label="GSD rank half-width")
                            gsd_prob_gap = gr.Slider(0, 1, value=rule_defaults["gsd_prob_gap"], step=0.01,
                                                     label="GSD probability gap")
                            gsd_embed_dist = gr.Slider(0, 4, value=rule_defaults["gsd_embed_dist"], step=0.05,
                                                       label="GSD embedding distance")
                    run = gr.Button("Generate", variant="primary")
                    status = gr.Markdown("", label="status", elem_id="status")
                with gr.Column(scale=2):
                    images = gr.Gallery(label="images", columns=5, height=180, elem_id="images")
                    same_tokens = gr.Markdown("", label="same tokens as AR", elem_id="same-tokens")
                    stats = gr.Dataframe(headers=TABLE_HEADERS, label="stats", wrap=True, elem_id="stats",
                                         column_widths=["19%", "9%", "11%", "11%", "9%", "12%", "9%", "20%"])
                    heatmaps = gr.Gallery(label="heatmaps", columns=5, height=180, elem_id="heatmaps")

            def toggle(selected):
                selected = selected or []
                shown = [any(part in m for m in selected) for part in ("zipar", "lantern", "gsd")]
                return gr.update(visible=any(shown)), *(gr.update(visible=s) for s in shown)

            methods.change(toggle, methods, [params_box, zipar_box, lantern_box, gsd_box], api_name=False, queue=False)

            def generate(condition, methods, seed, guidance_scale, temperature, top_k, top_p, zipar_window,
                         lantern_k, lantern_delta, gsd_rank_window, gsd_prob_gap, gsd_embed_dist):
                """AR and the chosen methods from one seed: images, a cost table, commit-order heatmaps,
                a line saying which gave AR's very tokens, and a status line."""
                try:
                    call = check_condition(pipe, condition)
                    settings = check_settings(pipe, seed, guidance_scale, temperature, top_k, top_p, zipar_window,
                                              lantern_k, lantern_delta, gsd_rank_window, gsd_prob_gap, gsd_embed_dist)
                    gallery, rows, maps, line = compare(pipe, call, list(methods or []), settings)
                except ValueError as err:
                    return [], [], [], "", f"**Cannot generate:** {err}"
                return (gallery, rows, maps, line,
                        f"Done: AR and {len(rows) - 1} method(s) from seed {settings['seed']}, {describe_placement(pipe)}.")

            run.click(
                generate,
                [condition, methods, seed, guidance_scale, temperature, top_k, top_p, zipar_window,
                 lantern_k, lantern_delta, gsd_rank_window, gsd_prob_gap, gsd_embed_dist],
                [images, stats, heatmaps, same_tokens, status],
                api_name="generate",
            )
        for title, module, builder, _, _ in TABS:
            with gr.Tab(title):
                tab_pipe, keyword = given.get(title, (None, None))
                getattr(importlib.import_module(module), builder)(**({keyword: tab_pipe} if tab_pipe is not None else {}), **where)
    guard_numbers(demo)
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=QUEUE_SIZE)
    return demo


def launch(pipe, host: str = "127.0.0.1", port: int = 7860, block: bool = True):
    demo = build_demo(pipe)
    demo.launch(server_name=host, server_port=port, share=False, prevent_thread_lock=not block)
    return demo
