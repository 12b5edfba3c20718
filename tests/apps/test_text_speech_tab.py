"""The Speech tab given a text-to-speech pipeline: it builds with a text box and the voices, and
its handler returns AR's clip and the accelerated one from one seed (the same clip under
auto), a cost table and a commit heatmap over (slot, frame) per method."""

import pytest

pytest.importorskip("gradio", reason="the demo needs the [demo] extra")
import gradio as gr  # noqa: E402

from mmspec.apps.audio_tab import build_speech_tab  # noqa: E402
from mmspec.apps.demo import TABS  # noqa: E402
from mmspec.apps.text_speech_tab import fast_methods, say_both  # noqa: E402
from tests.helpers.orpheus import orpheus_pipeline  # noqa: E402


@pytest.fixture(scope="module")
def pipe():
    p = orpheus_pipeline()
    p.set_progress_bar_config(disable=True)
    return p


def test_the_speech_tab_takes_a_text_to_speech_pipeline(pipe):
    assert "OrpheusPipeline" in next(tab[3] for tab in TABS if tab[0] == "Speech")
    with gr.Blocks() as demo, gr.Tab("Speech"):
        build_speech_tab(pipe)
    blocks = list(demo.blocks.values())
    assert any(isinstance(b, gr.Textbox) and b.label == "text" for b in blocks)
    assert any(isinstance(b, gr.Dropdown) and b.label == "voice" and [c[0] for c in b.choices] == ["tara", "leo"] for b in blocks)
    assert sum(isinstance(b, gr.Audio) for b in blocks) == 2


def test_methods_fit_the_layout(pipe):
    assert fast_methods(pipe) == ["auto", "keyed+previous-frame", "mc-sjd+previous-frame", "mc-sjd", "sjd"]


def test_ar_and_auto_side_by_side_are_one_clip(pipe):
    ar, fast, rows, maps, same = say_both(pipe, "hi there.", "tara", "auto", 5, 0.6)
    assert ar[0] == fast[0] == 24000 and (ar[1] == fast[1]).all()
    assert same.startswith("**Token-identical to AR:** `auto")
    assert [r[0] for r in rows][0] == "ar" and rows[1][-1] == "yes" and len(maps) == 2
    assert maps[0][0].size[0] == 480


def test_a_dia_pipeline_gets_the_same_page():
    from tests.helpers.dia import dia_pipeline

    dia = dia_pipeline()
    dia.set_progress_bar_config(disable=True)
    assert fast_methods(dia) == ["auto", "keyed+previous-step", "mc-sjd+previous-step", "mc-sjd", "sjd"]
    with gr.Blocks() as demo, gr.Tab("Speech"):
        build_speech_tab(dia)
    assert any(isinstance(b, gr.Dropdown) and b.label == "voice" and [c[0] for c in b.choices] == ["(none)"]
               for b in demo.blocks.values())
    ar, fast, rows, maps, _ = say_both(dia, "[S1] hi.", None, "auto", 2, 1.2)
    assert (ar[1] == fast[1]).all() and rows[1][-1] == "yes"
