"""The demo's Speech tab: one word said by AR and by an accelerated method from the same
seed, both playable, with the forward at which each (frame, codebook) token was committed.
Given a text-to-speech pipeline, the tab is `mmspec.apps.text_speech_tab`'s instead.

Its endpoint is `/speak` (`word`, `method`, `seed`, `guidance_scale`, `temperature` ->
`ar_audio`, `fast_audio`, `stats`, `heatmaps`, `status`).
"""

from __future__ import annotations

import gradio as gr
import torch

from mmspec.apps.clip_pair import clip_pair_column, side_by_side
from mmspec.apps.fields import seed_field, whole
from mmspec.apps.shipped import load_shipped
from mmspec.runs.batch import MAX_SEED
from mmspec.runs.placement import describe_placement
from mmspec.decoding.config import DecodingConfig
from mmspec.models.adapters.musicgen import undelay
from mmspec.pipelines.checks import sampling_config

FAST_METHODS = {  # label -> decoding
    "auto (AR's clip in fewer forwards)": DecodingConfig.from_name("auto"),
    "MC-SJD, copy drafts along time": DecodingConfig.from_name("mc-sjd", init="previous-step"),
    "MC-SJD": DecodingConfig.from_name("mc-sjd"),
    "MC-SJD, copy drafts + branches (tree attention)": DecodingConfig.from_name("mc-sjd", init="previous-step", branches=4),
    "SJD": DecodingConfig.from_name("sjd"),
    "MC-SJD + grouped rule (PCG)": DecodingConfig.from_name("mc-sjd+pcg", init="previous-step"),
}


def commit_frames(commit_iteration: torch.Tensor, codebooks: int) -> torch.Tensor:
    """`[K, frames]`: the forward that committed frame f of codebook k, from a clip's
    per-step `commit_iteration [T]` (the delay pattern undone)."""
    return undelay(commit_iteration[None, :, None].expand(1, -1, codebooks), codebooks)[0]


def speak_both(pipe, word: str, label: str, seed: int, sampling: dict):
    """AR and the chosen method from one seed: two clips, a cost table, two heatmaps and
    the line saying whether the accelerated clip has AR's very tokens."""
    say = lambda config: pipe(word, decoding=config, generator=torch.Generator().manual_seed(seed), **sampling)
    return side_by_side(say, (DecodingConfig.from_name("ar"), FAST_METHODS[label]),
                        lambda commits: commit_frames(commits, pipe.codebooks), "(codebook, frame)")


def build_speech_tab(pipe=None, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> None:
    """Lays out the tab inside the current `gr.Tab`; loads the shipped speech model (on
    `device`, in `dtype`) unless a speech pipeline is given (a text-to-speech one gets
    `build_text_speech_tab`'s page)."""
    if getattr(pipe, "speaks_text", False):
        from mmspec.apps.text_speech_tab import build_text_speech_tab

        return build_text_speech_tab(pipe)
    if pipe is None:
        from mmspec.assets import SPEECH_ASSETS

        try:
            pipe = load_shipped(SPEECH_ASSETS, device, dtype)
        except ModuleNotFoundError as err:
            if err.name != "torchaudio":
                raise
            gr.Markdown("The speech model needs torchaudio, an optional extra: `pip install 'mmspec[audio]'`.")
            return
    defaults = pipe.default_sampling
    gr.Markdown("A MusicGen decoder trained here says a word, 4 codebooks per step under MusicGen's delay pattern; "
                "the heatmaps show the forward that committed each codebook's token of each frame (dark = early). "
                "auto returns AR's very clip for the seed, in fewer forwards; SJD and MC-SJD sample AR's distribution.")
    with gr.Row():
        with gr.Column(scale=1):
            word = gr.Dropdown(pipe.words, value=pipe.words[7 % len(pipe.words)], label="word")
            method = gr.Dropdown(list(FAST_METHODS), value=next(iter(FAST_METHODS)), label="accelerated method")
            seed = seed_field()
            guidance_scale = gr.Slider(0, 10, value=defaults["guidance_scale"], step=0.25, label="guidance scale")
            temperature = gr.Slider(0, 2, value=defaults["temperature"], step=0.05, label="temperature (0 = greedy)")
            run = gr.Button("Speak", variant="primary")
            status = gr.Markdown("", label="status")
        ar_audio, fast_audio, stats, heatmaps = clip_pair_column("commit order over (codebook, frame)")

    def speak(word, method, seed, guidance_scale, temperature):
        """AR and the accelerated method from one seed: both clips, a cost table, heatmaps and a status line."""
        try:
            if word not in pipe.words:
                raise ValueError(f"unknown word {word!r}; this model speaks {', '.join(pipe.words)}")
            if method not in FAST_METHODS:
                raise ValueError(f"unknown method {method!r}; choose from {', '.join(FAST_METHODS)}")
            seed_value = whole("seed", seed, 0, MAX_SEED)
            sampling = dict(guidance_scale=float(guidance_scale), temperature=float(temperature))
            sampling_config({}, **sampling)
            ar, fast, rows, maps, same = speak_both(pipe, word, method, seed_value, sampling)
        except ValueError as err:
            return None, None, [], [], f"**Cannot speak:** {err}"
        return ar, fast, rows, maps, f"Done: {word!r} by AR and {method} from seed {seed_value}, {describe_placement(pipe)}. {same}"

    run.click(speak, [word, method, seed, guidance_scale, temperature], [ar_audio, fast_audio, stats, heatmaps, status],
              api_name="speak")
