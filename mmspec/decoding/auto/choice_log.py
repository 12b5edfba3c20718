"""What auto chose over a call (`DecodeStats.choices`), added up over calls and told in one line."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mmspec.decoding.auto.chooser import Choice


@dataclass
class ChoiceLog:
    """What auto chose over a call: forwards per window, per branch setting, per drafter (with
    " + learned" where the draft head drafted the first slot)."""

    windows: Counter = field(default_factory=Counter)
    branches: Counter = field(default_factory=Counter)
    drafters: Counter = field(default_factory=Counter)

    def add(self, choice: Choice) -> None:
        self.windows[choice.window] += 1
        self.branches["none" if choice.branches is None else str(choice.branches)] += 1
        self.drafters[getattr(choice.drafter, "name", "random") + (" + learned" if choice.head else "")] += 1

    def to_dict(self) -> dict:
        return {"windows": dict(sorted(self.windows.items())), "branches": dict(self.branches),
                "drafters": dict(self.drafters)}



def merge_choices(choices: list[dict]) -> dict:
    """The `DecodeStats.choices` of several calls, added up."""
    total = {"windows": Counter(), "branches": Counter(), "drafters": Counter()}
    for c in choices:
        for part, counts in c.items():
            total[part].update(counts)
    return {part: dict(sorted(counts.items())) for part, counts in total.items()}


def describe_choices(choices: dict) -> str:
    """One line, shares of the choices: "window 16 (70%), 8 (25%), 0 (5%); branches none (100%);
    first drafts above (100%)" (window 0: an AR step)."""
    def shares(counts: dict, top: int) -> str:
        total = sum(counts.values()) or 1
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        return ", ".join(f"{name} ({100 * count / total:.0f}%)" for name, count in ranked)

    return (f"window {shares(choices['windows'], 4)}; branches {shares(choices['branches'], 3)}; "
            f"first drafts {shares(choices['drafters'], 2)}")
