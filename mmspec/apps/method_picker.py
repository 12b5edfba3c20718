"""The Images tab's method picker: one control per independent choice of the decoding grammar
(`mmspec.decoding.names`), composed into the methods compared beside AR.

A method on the page is an *entry*: a decoding name of the grammar, then, joined by ", ",
the settings a user may fix ("window N", "branches N", "learned drafts"). Where auto
chooses (auto with exact acceptance in raster order), a setting left out is auto's to
choose; elsewhere it takes its plain default (window 16, random first drafts, no branches).
`compose` builds an entry from the picker's controls, `entry_config` reads one, through
`parse_decoding`, into the `DecodingConfig` the pipeline runs. `/generate` takes entries as
its `methods`.

Example:
    >>> compose("mc-sjd", "gsd", "zipar", [], None, None)
    'zipar+mc-sjd+gsd'
    >>> compose("auto", "exact", "raster", ["above"], 8, None)
    'auto+above, window 8'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import gradio as gr

from mmspec.apps.fields import whole
from mmspec.decoding.config import DecodingConfig, LPDDecoding, parse_decoding
from mmspec.decoding.drafts import DRAFTER_NAMES
from mmspec.decoding.names import RELAXED

# the controls' choices, (label, value): the values are the grammar's parts
DRAFTING = (("auto", "auto"), ("keyed", "keyed"), ("MC-SJD", "mc-sjd"), ("SJD", "sjd"), ("AR", "ar"))
ACCEPTANCE = (("exact", "exact"), ("LANTERN", "lantern"), ("GSD", "gsd"), ("PCG", "pcg"))
ORDER = (("raster", "raster"), ("ZipAR", "zipar"))
LEARNED = "learned drafts"  # an entry's setting: the pipeline's learned draft head drafts the first slot
LEARNED_HEAD = "learned head"  # the same, as a choice among the first drafts
MAX_METHODS = 4  # one request decodes AR plus at most this many: five one-image decodes at most
# drafts per forward: 16-32 in the papers; on the shipped model no method is faster than
# AR past 64 (window 256 costs 2x to 7x AR's time), so larger windows only hold the queue
MAX_WINDOW = 64
MAX_BRANCHES = 8  # candidates per slot; each adds branch_slots x (1 + branch_length) tokens to a forward
DEFAULT_METHODS = ("auto", "mc-sjd", "zipar+mc-sjd")
AUTO_CHOOSES = "auto chooses"


@dataclass(frozen=True)
class Entry:
    """A method on the page: a decoding `name` and the settings it fixes."""

    name: str
    window: int | None = None  # None: auto's choice, or the plain default (16)
    branches: int | None = None  # None: auto's choice, or none
    learned: bool = False  # the pipeline's learned draft head drafts the first slot

    def __str__(self) -> str:
        settings = ([f"window {self.window}"] if self.window is not None else []) + \
            ([f"branches {self.branches}"] if self.branches is not None else []) + ([LEARNED] if self.learned else [])
        return ", ".join([self.name, *settings])


def values(choices) -> list[str]:
    return [value for _, value in choices]


def setting_number(name: str, text: str, low: int, high: int) -> int:
    """A whole number written in an entry ("window 8") or a field."""
    number = int(text) if text.isascii() and text.isdigit() else text
    return whole(name, number, low, high)


def optional_number(name: str, value, low: int, high: int) -> int | None:
    """A picker field's whole number: None when empty (auto's choice, or the default)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    return setting_number(name, value.strip(), low, high) if isinstance(value, str) else whole(name, value, low, high)


def parse_entry(text, window_max: int = MAX_WINDOW) -> Entry:
    """`text` ("mc-sjd+above, window 8, learned drafts") as an `Entry`, or a one-line
    ValueError naming what is wrong; the name itself is read by `entry_config`."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a method must be a decoding name such as auto or zipar+mc-sjd+gsd, got {text!r}")
    name, *settings = [part.strip() for part in text.split(",")]
    found: dict = {}
    for setting in settings:
        key, _, number = setting.partition(" ")
        if key in found or (setting == LEARNED and LEARNED in found):
            raise ValueError(f"{text!r} gives {key} twice")
        if setting == LEARNED:
            found[LEARNED] = True
        elif key == "window":
            found[key] = setting_number("window", number.strip(), 1, window_max)
        elif key == "branches":
            found[key] = setting_number("branches", number.strip(), 0, MAX_BRANCHES)
        else:
            raise ValueError(f"unknown setting {setting!r} in {text!r}; after the name come 'window N', 'branches N' "
                             f"or '{LEARNED}', joined by ', '")
    return Entry(name, found.get("window"), found.get("branches"), found.get(LEARNED, False))


def combination_error(drafting: str, acceptance: str, order: str, drafts: bool) -> str | None:
    """Why the grammar has no method for this drafting, acceptance and order (with first
    drafts or not), saying which choice to change; None when it has one."""
    if drafting == "ar":
        if acceptance != "exact":
            return (f"AR accepts every token it draws, so {acceptance} has nothing to relax: choose SJD, MC-SJD or auto "
                    f"for a relaxed rule")
        if order == "raster":
            return ("AR is decoded first already, as the baseline: choose another drafting, or the ZipAR order "
                    "(rows of AR side by side)")
        if drafts:
            return "AR drafts nothing: first drafts, window and branches go with auto, keyed, MC-SJD or SJD"
    if drafting == "keyed" and acceptance != "exact":
        return (f"keyed tests each draft for equality with AR's token, so it has no relaxed rule: use {acceptance} "
                f"with MC-SJD, SJD or auto")
    return None


def name_combination_error(name: str) -> str | None:
    """`combination_error` for a typed name made of the grammar's parts only ("keyed+gsd")."""
    parts = name.lower().split("+")
    if not set(parts) <= {*values(DRAFTING), *RELAXED, "zipar", *DRAFTER_NAMES}:
        return None
    drafting = next((p for p in parts if p in values(DRAFTING)), "ar" if parts == ["zipar"] else "sjd")
    acceptance = next((p for p in parts if p in RELAXED), "exact")
    return combination_error(drafting, acceptance, "zipar" if "zipar" in parts else "raster",
                             any(p in DRAFTER_NAMES for p in parts))


def compose(drafting: str, acceptance: str, order: str, first_drafts, window, branches,
            window_max: int = MAX_WINDOW) -> str:
    """The entry the picker's controls say: drafting ("auto", "keyed", "mc-sjd", "sjd",
    "ar"), acceptance ("exact" or a relaxed rule), order ("raster", "zipar"), first drafts
    (drafter names in order, and `LEARNED_HEAD`; none: auto's choice or random), window and
    branches (whole numbers, as numbers or text; None or empty: auto's choice or the default). A combination the grammar has no method
    for is a one-line ValueError saying which choice to change."""
    for name, value, choices in (("drafting", drafting, DRAFTING), ("acceptance", acceptance, ACCEPTANCE),
                                 ("order", order, ORDER)):
        if value not in values(choices):
            raise ValueError(f"{name} must be one of {', '.join(values(choices))}, got {value!r}")
    first = list(first_drafts or [])
    drafters = [d for d in first if d != LEARNED_HEAD]
    window = optional_number("window", window, 1, window_max)
    branches = optional_number("branches", branches, 0, MAX_BRANCHES)
    error = combination_error(drafting, acceptance, order, bool(first) or window is not None or branches is not None)
    if error:
        raise ValueError(error)
    parts = (["zipar"] if order == "zipar" else []) + ([] if drafting == "ar" else [drafting]) + \
        ([acceptance] if acceptance != "exact" else []) + drafters
    return str(Entry("+".join(parts), window, branches, LEARNED_HEAD in first))


def entry_config(pipe, text: str, params: dict) -> DecodingConfig:
    """The `DecodingConfig` of an entry, checked against `pipe` (`check_decoding`: window
    against the sequence, ZipAR window against a row, memory); `params` are the page's
    rule and ZipAR parameters (`DecodingConfig.from_name`'s keywords)."""
    entry = parse_entry(text, min(MAX_WINDOW, pipe.sequence_length))
    try:
        config = parse_decoding(entry.name, window=entry.window, branches=entry.branches, **params)
    except ValueError as err:  # the grammar's error lists every name: say which choice to change where we can
        error = name_combination_error(entry.name)
        raise ValueError(f"{entry.name}: {error}" if error else str(err)) from None
    if isinstance(config, LPDDecoding):
        raise ValueError(f"{entry.name} is LPD's decoding, for an LPD model: see the LPD tab")
    if config.method == "ar":
        if config.exact:
            raise ValueError("ar is decoded first already, as the baseline; compare other methods with it")
        if entry.window is not None or entry.branches is not None:
            raise ValueError(f"{entry.name} (rows of AR) drafts nothing: it takes no window or branches")
    if entry.learned:
        if getattr(pipe, "drafter", None) is None:
            raise ValueError(f"{text!r}: this pipeline has no learned draft head")
        if config.method == "ar" or config.scheduler.name != "raster" or config.branches:
            raise ValueError(f"{text!r}: learned drafts draft a raster window without branches; drop zipar and branches")
        config = dataclasses.replace(config, head=pipe.drafter)
    return pipe.check_decoding(config)


def check_entries(pipe, entries, params: dict) -> list[DecodingConfig]:
    """The configs of the page's entries (at most `MAX_METHODS`, none twice)."""
    entries = list(entries or [])
    if len(entries) > MAX_METHODS:
        raise ValueError(f"compare at most {MAX_METHODS} methods with AR at once, got {len(entries)}")
    if len(set(entries)) != len(entries):
        raise ValueError("methods lists a method twice")
    return [entry_config(pipe, entry, params) for entry in entries]


def first_draft_choices(pipe) -> list[str]:
    """The drafters that fit the pipeline's layout (copy drafters along its axes), and its
    learned head when it has one."""
    offered = []
    for name in DRAFTER_NAMES:
        if name == "phrase-lookup":  # text's prompt-lookup decoding
            continue
        try:
            pipe.check_decoding(DecodingConfig.from_name(f"mc-sjd+{name}"))
        except ValueError:
            continue
        offered.append(name)
    return offered + ([LEARNED_HEAD] if getattr(pipe, "drafter", None) is not None else [])


def auto_chooses(drafting: str, acceptance: str, order: str) -> bool:
    """Whether auto chooses the window, first drafts and branches (`DecodingConfig.chooses`)."""
    return drafting == "auto" and acceptance == "exact" and order == "raster"


def hints(drafting: str, acceptance: str, order: str) -> tuple[dict, dict, dict]:
    """Updates of the first drafts, window and branches fields: what an empty one means for
    this drafting ("auto chooses" where auto chooses), disabled for AR."""
    if drafting == "ar":
        off = dict(interactive=False, value="", placeholder="AR drafts nothing")
        return gr.update(interactive=False, value=[], info="AR drafts nothing"), gr.update(**off), gr.update(**off)
    if auto_chooses(drafting, acceptance, order):
        return (gr.update(interactive=True, info=f"none: {AUTO_CHOOSES}"),
                gr.update(interactive=True, placeholder=AUTO_CHOOSES), gr.update(interactive=True, placeholder=AUTO_CHOOSES))
    fixed = " (auto's choices are fixed with a relaxed rule or ZipAR)" if drafting == "auto" else ""
    return (gr.update(interactive=True, info="none: " + ("auto's first drafter" if drafting == "auto" else "random") + fixed),
            gr.update(interactive=True, placeholder="16"), gr.update(interactive=True, placeholder="0 (none)"))


def build_picker(pipe, params: dict) -> gr.Dropdown:
    """Lays out the picker: the methods compared beside AR, then one control per choice of
    the grammar and an add button; returns the methods list (the `/generate` input).
    `params` are the page's default rule and ZipAR parameters, for checking an entry as it
    is added."""
    default = list(DEFAULT_METHODS)
    window_max = min(MAX_WINDOW, pipe.sequence_length)
    methods = gr.Dropdown(default, value=default, multiselect=True, allow_custom_value=True, max_choices=MAX_METHODS,
                          label=f"methods beside AR (at most {MAX_METHODS}): compose one below, or remove one with its x",
                          elem_id="methods")
    # any entry is taken, not only the listed ones: the API says list[str], not the defaults' Literal
    methods.api_info = lambda: {"type": "array", "items": {"type": "string"}}
    with gr.Group(elem_id="picker"):
        drafting = gr.Radio(list(DRAFTING), value="auto", label="drafting", elem_id="drafting",
                            info="auto: keyed, choosing window, first drafts and branches forward by forward")
        with gr.Row():
            acceptance = gr.Radio(list(ACCEPTANCE), value="exact", label="acceptance", elem_id="acceptance")
            order = gr.Radio(list(ORDER), value="raster", label="order", elem_id="order")
        first_drafts = gr.Dropdown(first_draft_choices(pipe), value=[], multiselect=True, label="first drafts, in order",
                                   info=f"none: {AUTO_CHOOSES}", elem_id="first-drafts")
        with gr.Row():
            # text fields: a number field shows 0 when empty, where empty means auto chooses
            window = gr.Textbox(value="", label=f"window (drafts per forward, 1 to {window_max})", placeholder=AUTO_CHOOSES,
                                max_lines=1, elem_id="window")
            branches = gr.Textbox(value="", label=f"branches (tree attention, 0 to {MAX_BRANCHES})", placeholder=AUTO_CHOOSES,
                                  max_lines=1, elem_id="branches")
        add = gr.Button("Add auto", elem_id="add")
    note = gr.Markdown("", elem_id="picker-note")
    controls = [drafting, acceptance, order, first_drafts, window, branches]

    def preview(drafting, acceptance, order, first_drafts, window, branches):
        if drafting == "ar":  # hints() empties and disables these fields
            first_drafts, window, branches = [], "", ""
        try:
            entry = compose(drafting, acceptance, order, first_drafts, window, branches, window_max)
        except ValueError as err:
            return (*hints(drafting, acceptance, order), gr.update(value="Add"), f"**Cannot add:** {err}")
        return (*hints(drafting, acceptance, order), gr.update(value=f"Add {entry}"), "")

    def add_method(drafting, acceptance, order, first_drafts, window, branches, chosen):
        try:
            entry = compose(drafting, acceptance, order, first_drafts, window, branches, window_max)
            if entry in (chosen or []):
                raise ValueError(f"{entry} is compared already")
            check_entries(pipe, [*(chosen or []), entry], params)
        except ValueError as err:
            return gr.update(), f"**Cannot add:** {err}"
        chosen = [*(chosen or []), entry]
        return gr.update(value=chosen, choices=list(dict.fromkeys(default + chosen))), f"Added {entry}."

    for control in controls:
        control.input(preview, controls, [first_drafts, window, branches, add, note], api_name=False, queue=False)
    add.click(add_method, [*controls, methods], [methods, note], api_name=False, queue=False)
    return methods
