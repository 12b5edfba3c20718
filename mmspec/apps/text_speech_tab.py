"""The Speech tab for a text-to-speech pipeline (Orpheus-format, Dia): a text in a voice, said by
AR and by an accelerated method from the same seed, both playable, with the forward at which
each token was committed.

`build_speech_tab` lays this out when the app is given such a pipeline (`mmspec demo
--pipeline DIR`). Its endpoint is `/speak_text` (`text`, `voice`, `method`, `seed`,
`temperature` -> `ar_audio`, `fast_audio`, `stats`, `heatmaps`, `status`).
"""

from __future__ import annotations

import gradio as gr
import torch

from mmspec.apps.clip_pair import clip_pair_column, side_by_side
from mmspec.apps.fields import seed_field, whole
from mmspec.decoding.config import DecodingConfig
from mmspec.pipelines.checks import sampling_config
from mmspec.runs.batch import MAX_SEED
from mmspec.runs.placement import describe_placement

CANDIDATE_METHODS = ("auto", "keyed+previous-frame", "keyed+previous-step", "mc-sjd+previous-frame", "mc-sjd+previous-step",
                     "mc-sjd", "sjd")
MAX_TEXT_CHARS = 300  # a text's prefill is part of both decodes of a request
NO_VOICE = "(none)"


def fast_methods(pipe) -> list[str]:
    """The accelerated methods the pipeline takes (its layout decides which copy drafter fits)."""
    methods = []
    for name in CANDIDATE_METHODS:
        try:
            pipe.check_decoding(name)
        except ValueError:
            continue
        methods.append(name)
    return methods


def say_both(pipe, text: str, voice: str | None, method: str, seed: int, temperature: float):
    """AR and `method` from one seed: two clips, a cost table, two commit heatmaps and the
    line saying whether the accelerated clip has AR's very tokens."""
    say = lambda config: pipe(text, voice=voice, decoding=config, temperature=temperature,
                              generator=torch.Generator().manual_seed(seed))
    return side_by_side(say, (DecodingConfig.from_name("ar"), DecodingConfig.from_name(method)), pipe.commit_grid, "token")


def build_text_speech_tab(pipe) -> None:
    """Lays out the tab for a text-to-speech pipeline inside the current `gr.Tab`."""
    methods = fast_methods(pipe)
    voices = list(pipe.voices) or [NO_VOICE]
    gr.Markdown(f"{type(pipe).__name__} says a text. auto returns AR's very clip for the seed in fewer forwards; "
                "SJD and MC-SJD sample AR's distribution. The heatmaps show the forward that committed each token "
                "(dark = early).")
    with gr.Row():
        with gr.Column(scale=1):
            text = gr.Textbox(label="text", value="Hey there, how are you today?", max_length=MAX_TEXT_CHARS)
            voice = gr.Dropdown(voices, value=voices[0], label="voice")
            method = gr.Dropdown(methods, value=methods[0], label="accelerated method")
            seed = seed_field()
            temperature = gr.Slider(0, 2, value=pipe.default_sampling["temperature"], step=0.05, label="temperature (0 = greedy)")
            run = gr.Button("Speak", variant="primary")
            status = gr.Markdown("", label="status")
        ar_audio, fast_audio, stats, heatmaps = clip_pair_column("commit order")

    def speak_text(text, voice, method, seed, temperature):
        """AR and the accelerated method from one seed: both clips, a cost table, heatmaps and a status line."""
        try:
            if not isinstance(text, str) or not text.strip():
                raise ValueError("the text is empty")
            if len(text) > MAX_TEXT_CHARS:
                raise ValueError(f"the text has {len(text)} characters; at most {MAX_TEXT_CHARS}")
            if voice not in voices:
                raise ValueError(f"unknown voice {voice!r}; choose from {', '.join(voices)}")
            if method not in methods:
                raise ValueError(f"unknown method {method!r}; choose from {', '.join(methods)}")
            seed_value = whole("seed", seed, 0, MAX_SEED)
            sampling_config({}, temperature=temperature)
            pipe.check_text(text, None if voice == NO_VOICE else voice)
            ar, fast, rows, maps, same = say_both(pipe, text, None if voice == NO_VOICE else voice, method, seed_value,
                                                  float(temperature))
        except (ValueError, TypeError) as err:
            return None, None, [], [], f"**Cannot speak:** {err}"
        return ar, fast, rows, maps, f"Done: AR and {method} from seed {seed_value}, {describe_placement(pipe)}. {same}"

    run.click(speak_text, [text, voice, method, seed, temperature], [ar_audio, fast_audio, stats, heatmaps, status],
              api_name="speak_text")
