"""Helpers shared by test modules: tiny models built from configs, fixtures' paths, layouts
and the session cases of the contract tests. Test modules import from here, never from
one another."""

from pathlib import Path

FIXTURES = Path(__file__).parents[1] / "fixtures"
