"""The Images tab's method picker: one control per choice of the decoding grammar, composed
into entries that go through `parse_decoding`."""

import itertools

import pytest

gr = pytest.importorskip("gradio", reason="the demo needs the [demo] extra")

from mmspec.apps.method_picker import (  # noqa: E402  (after the skip: it imports gradio)
    ACCEPTANCE, AUTO_CHOOSES, DRAFTING, LEARNED_HEAD, ORDER, build_picker, compose, entry_config, first_draft_choices,
    hints, parse_entry, values,
)
from mmspec.decoding.names import DECODINGS  # noqa: E402
from mmspec.models.networks.draft_head import DraftHead  # noqa: E402
from tests.helpers.pipelines import tiny_c2i_pipeline  # noqa: E402

PARAMS = dict(zipar_window=2)  # the tiny model's rows are 4 tokens


@pytest.fixture(scope="module")
def pipe():
    return tiny_c2i_pipeline(class_names=("circle", "square", "stripes"))


def test_every_method_of_the_grammar_is_composed_from_the_three_choices():
    """The page offered 32 checkboxes of names; now drafting x acceptance x order compose
    every name of the grammar but plain AR (the baseline), and nothing else."""
    composed = set()
    for drafting, acceptance, order in itertools.product(values(DRAFTING), values(ACCEPTANCE), values(ORDER)):
        try:
            composed.add(compose(drafting, acceptance, order, [], None, None))
        except ValueError:
            continue
    assert composed == set(DECODINGS) - {"ar"}


@pytest.mark.parametrize(
    "controls, entry",
    [
        (("auto", "exact", "raster", [], None, None), "auto"),
        (("mc-sjd", "gsd", "zipar", [], None, None), "zipar+mc-sjd+gsd"),
        (("ar", "exact", "zipar", [], None, None), "zipar"),
        (("auto", "exact", "raster", ["lookup", "above"], 8, 2), "auto+lookup+above, window 8, branches 2"),
        (("keyed", "exact", "raster", [LEARNED_HEAD], None, 0), "keyed, branches 0, learned drafts"),
    ],
)
def test_the_controls_compose_an_entry_with_its_fixed_settings(controls, entry):
    assert compose(*controls) == entry


@pytest.mark.parametrize(
    "controls, message",
    [
        (("keyed", "lantern", "raster", [], None, None), "keyed tests each draft for equality with AR's token, so it has no "
                                                         "relaxed rule: use lantern with MC-SJD, SJD or auto"),
        (("ar", "gsd", "zipar", [], None, None), "AR accepts every token it draws, so gsd has nothing to relax"),
        (("ar", "exact", "raster", [], None, None), "AR is decoded first already, as the baseline"),
        (("ar", "exact", "zipar", ["above"], None, None), "AR drafts nothing"),
        (("mc-sjd", "exact", "raster", [], 2.5, None), "window must be a whole number from 1 to 64, got 2.5"),
        (("mc-sjd", "exact", "raster", [], None, 9), "branches must be a whole number from 0 to 8, got 9"),
        (("mc-sjd", "strict", "raster", [], None, None), "acceptance must be one of exact, lantern, gsd, pcg, got 'strict'"),
    ],
)
def test_a_combination_the_grammar_lacks_is_one_line_saying_what_to_change(controls, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")) as err:
        compose(*controls)
    assert "\n" not in str(err.value)


def test_an_entry_goes_through_parse_decoding_and_the_pipeline_check(pipe):
    config = entry_config(pipe, "auto+above, window 8, branches 2", PARAMS)
    assert (config.method, config.window, config.branches, config.drafter.name) == ("auto", 8, 2, "above")
    chosen = entry_config(pipe, "auto", PARAMS)
    assert chosen.chooses and chosen.window is None and chosen.init is None and chosen.branches is None
    assert entry_config(pipe, "zipar+mc-sjd+gsd", PARAMS).describe() == "zipar+mc-sjd+gsd (zipar_window=2)"
    with pytest.raises(ValueError, match="zipar_window 8 is longer than a 4-token row"):
        entry_config(pipe, "zipar+mc-sjd", dict(zipar_window=8))
    with pytest.raises(ValueError, match="window must be a whole number from 1 to 16, got 17"):
        entry_config(pipe, "mc-sjd, window 17", PARAMS)  # the tiny model's 16 tokens
    with pytest.raises(ValueError, match="this pipeline has no learned draft head"):
        entry_config(pipe, "auto, learned drafts", PARAMS)
    with pytest.raises(ValueError, match="lpd-20 is LPD's decoding"):
        entry_config(pipe, "lpd-20", PARAMS)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "a method must be a decoding name"),
        ("mc-sjd, window 8, window 4", "gives window twice"),
        ("mc-sjd, window eight", "window must be a whole number from 1 to 64, got 'eight'"),
        ("mc-sjd, speed 2", "unknown setting 'speed 2'"),
    ],
)
def test_a_malformed_entry_is_one_line(text, message):
    with pytest.raises(ValueError, match=message):
        parse_entry(text)


def test_learned_drafts_go_with_a_raster_window_without_branches(pipe):
    pipe = tiny_c2i_pipeline(n_layer=2)
    pipe.drafter = DraftHead.for_target(pipe.transformer)
    assert entry_config(pipe, "mc-sjd, learned drafts", PARAMS).head is pipe.drafter
    for text in ("zipar+mc-sjd, learned drafts", "mc-sjd, branches 2, learned drafts"):
        with pytest.raises(ValueError, match="learned drafts draft a raster window without branches"):
            entry_config(pipe, text, PARAMS)


def test_auto_chooses_is_shown_where_auto_chooses():
    """The window field said 16 while auto chose the window itself."""
    first, window, branches = hints("auto", "exact", "raster")
    assert window["placeholder"] == branches["placeholder"] == AUTO_CHOOSES and first["info"] == f"none: {AUTO_CHOOSES}"
    # with a relaxed rule or ZipAR auto's choices are fixed (DecodingConfig.chooses): the plain defaults
    for drafting, acceptance, order in (("auto", "gsd", "raster"), ("auto", "exact", "zipar"), ("mc-sjd", "exact", "raster")):
        first, window, branches = hints(drafting, acceptance, order)
        assert window["placeholder"] == "16" and branches["placeholder"] == "0 (none)" and AUTO_CHOOSES not in first["info"]
    first, window, branches = hints("ar", "exact", "zipar")
    assert not window["interactive"] and not branches["interactive"] and not first["interactive"]


def test_the_picker_has_at_most_eight_controls_and_offers_the_drafters_that_fit(pipe):
    """The Images tab showed 32 checkboxes and a window field for the method."""
    pipe = tiny_c2i_pipeline(n_layer=2)
    pipe.drafter = DraftHead.for_target(pipe.transformer)
    with gr.Blocks() as page:
        build_picker(pipe, PARAMS)
    controls = [b for b in page.blocks.values() if isinstance(b, (gr.components.FormComponent, gr.Button))]
    assert len(controls) <= 8
    assert first_draft_choices(pipe) == ["random", "left", "above", "lookup", LEARNED_HEAD]  # not the video/audio copies
