"""The app's checks of what a page or an API call sends: whole numbers and fractions in their
range, number fields that refuse a string, null, NaN or infinity in one line, and the
refusal every tab raises (`refusal`: a `gr.Error` without a traceback in the server's log).

Gradio hands a number field's raw JSON value to the component (`"5"`, `null`, `NaN`,
`Infinity` all arrive), and its own checks then fail with a TypeError that the client sees
only as "upstream app raised an exception". `guard_numbers` wraps every number field and
slider of a page so such a value is refused, naming the field, before any work.
"""

from __future__ import annotations

import math

import gradio as gr

from mmspec.runs.batch import MAX_SEED


def refusal(message: str) -> gr.Error:
    """A one-line `gr.Error` for a caller's mistake: shown to the page and the API client,
    without a traceback in the server's log (a refusal, not a fault)."""
    error = gr.Error(message)
    error.print_exception = False
    return error


def is_number(value) -> bool:
    """A finite int or float (not a bool, a string or None)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def whole(name: str, value, low: int, high: int | None = None) -> int:
    """`value` as an int when it is a whole number from `low` to `high`, else a one-line
    ValueError naming `name` (2.5 is refused, not rounded)."""
    if not is_number(value) or value != int(value) or value < low or (high is not None and value > high):
        span = f">= {low}" if high is None else f"from {low} to {high}"
        raise ValueError(f"{name} must be a whole number {span}, got {value!r}")
    return int(value)


def fraction(name: str, value, high: float = 1.0) -> float:
    if not is_number(value) or not 0 <= value <= high:
        raise ValueError(f"{name} must be a number from 0 to {high:g}, got {value!r}")
    return float(value)


def seed_field(**kwargs) -> gr.Number:
    """The seed of a tab: a whole number from 0 to `MAX_SEED` (an int in the API).
    `guard_numbers` refuses anything else before the tab's function runs."""
    field = gr.Number(value=kwargs.pop("value", 0), precision=0, label=kwargs.pop("label", "seed"), **kwargs)
    field.whole_range = ("seed", 0, MAX_SEED)  # read by check_number
    return field


def check_number(field: gr.Number | gr.Slider, payload):
    """`payload` unchanged when `field` takes it; else a `refusal` naming the field: not a
    number (a string, NaN, infinity), or for a seed, not a whole number in its range (None
    included). An empty field (None) elsewhere is left to the tab's function, which says
    what an empty field means there."""
    whole_range = getattr(field, "whole_range", None)
    if whole_range is not None:
        name, low, high = whole_range
        try:
            whole(name, payload, low, high)
        except ValueError as err:
            raise refusal(str(err)) from None
    elif payload is not None and not is_number(payload):
        raise refusal(f"{field.label or 'a number field'} must be a finite number, got {payload!r}")
    return payload


def guard_numbers(blocks: gr.Blocks) -> None:
    """Wraps the `preprocess` of every number field and slider of `blocks` with `check_number`.
    Wrapped on the instance: a subclass of a Gradio component would make Gradio write a
    `.pyi` stub beside this module."""
    for block in blocks.blocks.values():
        if isinstance(block, (gr.Number, gr.Slider)) and not getattr(block, "_guarded", False):
            preprocess = block.preprocess
            block.preprocess = lambda payload, field=block, inner=preprocess: inner(check_number(field, payload))
            block._guarded = True
