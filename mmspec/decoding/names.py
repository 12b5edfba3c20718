"""The one grammar of decoding names: every place that takes a method by name parses it here.

A name is parts joined by "+", in any order, each at most once:
  * drafting: "ar", "sjd", "mc-sjd", "keyed" or "auto" (SJD when only drafters are named);
  * acceptance: exact (no part), "lantern", "gsd" or "pcg" (relaxed; need sjd, mc-sjd or
    auto);
  * schedule: raster (no part) or "zipar" ("zipar" alone: rows of AR side by side);
  * first drafts: drafter names (`mmspec.decoding.drafts.DRAFTER_NAMES`: "random", "left",
    "above", "lookup", ...), and "face-lookup", a mesh drafter that `MeshPipeline` supplies
    (`FAMILY_DRAFTERS`); none with "ar".
Two names stand alone: "prompt-lookup" (SJD redrafting every slot with "phrase-lookup") and
"lpd-<steps>" (LPD's group-by-group decoding in `steps` forwards, for an LPD model).

`parse_name` returns what a name says (`DecodingName`); `mmspec.decoding.config` builds
the configs from it (`DecodingConfig.from_name`, `LPDDecoding.from_name`, and
`parse_decoding` for either). A family that takes only some methods (text, meshes, LPD)
checks the parsed config, not the string.

Example:
    >>> parse_name("gsd+mc-sjd+zipar")
    DecodingName(method='mc-sjd', rule='gsd', zipar=True, drafters=(), redraft=False, steps=None)
    >>> parse_name("lpd-20").steps
    20
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from mmspec.decoding.drafts import DRAFTER_NAMES

DRAFTING = ("ar", "sjd", "mc-sjd", "keyed", "auto")
RELAXED = ("lantern", "gsd", "pcg")
SCHEDULES = ("zipar",)
PROMPT_LOOKUP = "prompt-lookup"
LPD_PREFIX = "lpd-"
LPD_NAMES = ("lpd-20", "lpd-32")  # the step counts the shipped LPD model has group-size tables for (16x16 grids)
# drafter names a model family supplies the drafter of (the mesh pipeline's face-aware lookup)
FAMILY_DRAFTERS = {"face-lookup": "meshes (MeshPipeline)"}


def _valid_names() -> list[str]:
    names = []
    for zipar, drafting, rule in itertools.product(("", "zipar"), DRAFTING, ("",) + RELAXED):
        if drafting in ("ar", "keyed") and rule:  # both test drafts for equality with AR's token
            continue
        parts = [zipar] + ([] if (drafting == "ar" and zipar) else [drafting]) + [rule]
        names.append("+".join(p for p in parts if p))
    return names


DECODINGS = tuple(_valid_names())  # every name without drafters, in canonical order
ORDER = ("zipar", *DRAFTING, *RELAXED)  # the canonical order of a name's parts


@dataclass(frozen=True)
class DecodingName:
    """What a decoding name says.

    Attributes:
        method (`str`): "ar", "sjd", "mc-sjd", "keyed", "auto", or "lpd" for "lpd-<steps>".
        rule (`str`, *optional*): a relaxed acceptance rule ("lantern", "gsd", "pcg"); None: exact.
        zipar (`bool`): rows decoded side by side (ZipAR).
        drafters (`tuple[str, ...]`): first-draft drafter names, in the order given.
        redraft (`bool`): prompt-lookup: every forward redrafts every slot.
        steps (`int`, *optional*): LPD's forwards ("lpd-20": 20).
    """

    method: str
    rule: str | None = None
    zipar: bool = False
    drafters: tuple[str, ...] = ()
    redraft: bool = False
    steps: int | None = None

    @property
    def lpd(self) -> bool:
        return self.method == "lpd"


def unknown_name(name) -> ValueError:
    """The one-line error for a name outside the grammar, listing what it takes."""
    return ValueError(
        f"unknown decoding {name!r}; choose from {', '.join(DECODINGS)}, optionally with drafters "
        f"({', '.join(DRAFTER_NAMES)}; {', '.join(f'{n} for {who}' for n, who in FAMILY_DRAFTERS.items())}) joined by '+', "
        f"or prompt-lookup, or lpd-<steps> for an LPD model ({', '.join(LPD_NAMES)})"
    )


def parse_name(name: str) -> DecodingName:
    """`name` as a `DecodingName` (case-insensitive), or a one-line `ValueError` naming what
    is wrong."""
    if not isinstance(name, str):
        raise unknown_name(name)
    text = name.lower()
    if text == PROMPT_LOOKUP:
        return DecodingName("sjd", drafters=("phrase-lookup",), redraft=True)
    if text.startswith(LPD_PREFIX):
        steps = text[len(LPD_PREFIX):]
        if not (steps.isascii() and steps.isdigit()) or int(steps) < 1:
            raise ValueError(f"unknown decoding {name!r}: LPD's decoding is lpd-<steps>, a whole number of forwards >= 1 "
                             f"({', '.join(LPD_NAMES)}), alone")
        return DecodingName("lpd", steps=int(steps))
    given = text.split("+")
    drafters = tuple(p for p in given if p in DRAFTER_NAMES or p in FAMILY_DRAFTERS)
    parts = [p for p in given if p not in drafters]
    if drafters and not any(p in DRAFTING for p in parts):
        parts.append("sjd")
    canonical = "+".join(sorted(parts, key=lambda p: ORDER.index(p) if p in ORDER else len(ORDER)))
    if canonical not in DECODINGS or len(set(given)) != len(given) or (drafters and "ar" in parts):
        raise unknown_name(name)
    return DecodingName(
        method=next((p for p in parts if p in DRAFTING), "ar"),
        rule=next((p for p in parts if p in RELAXED), None),
        zipar="zipar" in parts,
        drafters=drafters,
    )
