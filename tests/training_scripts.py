"""Loads a script of `scripts/` (or another folder of the repository) as a module: they are
scripts, not a package, and some import their sibling `train_default_model`."""

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).parents[1]
SCRIPTS = REPO / "scripts"


def load_script(name: str, folder: str = "scripts"):
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(name, REPO / folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPTS))
    return module
