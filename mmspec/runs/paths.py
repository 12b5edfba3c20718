"""Where a run's files may go: every name a file gets from outside (an item id, a class
name of a saved pipeline) is a plain file name that resolves inside the output folder, or
the run is refused in one line before any work.

Example:
    >>> from pathlib import Path
    >>> inside(Path("out"), "images/cat.png")
    PosixPath('out/images/cat.png')
    >>> file_name("../victim", "item id")
    Traceback (most recent call last):
    ...
    ValueError: item id '../victim' is not a plain file name: use 1 to 128 letters, digits, '-', '_' or '.', not starting with '.'
"""

from __future__ import annotations

import re
from pathlib import Path

# a name of one file or folder: never a path (no '/' or '\'), never hidden or '.'/'..'
# (temporary files are `.{name}.{pid}.tmp`), never a glob, at most 128 characters
FILE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


def file_name(name, what: str) -> str:
    """`name` if it is a plain file name (`FILE_NAME`), else a one-line `ValueError` that
    calls it `what` ("item id", "class name 'box' of the pipeline")."""
    if not isinstance(name, str) or not FILE_NAME.fullmatch(name):
        raise ValueError(f"{what} {name!r} is not a plain file name: use 1 to 128 letters, digits, '-', '_' or '.', "
                         "not starting with '.'")
    return name


def class_file_name(class_name) -> str:
    """A class name as the start of file names ("circle right" -> "circle_right"): spaces
    become '_', and what is left must be a plain file name. Class names come from a saved
    pipeline's `model_index.json`, which anyone may have written."""
    text = class_name.replace(" ", "_") if isinstance(class_name, str) else class_name
    if not isinstance(text, str) or not FILE_NAME.fullmatch(text):
        raise ValueError(f"class name {class_name!r} of the pipeline cannot name files: use letters, digits, spaces, '-', '_' "
                         "or '.', not starting with '.'")
    return text


def inside(out_dir: Path, relative: str) -> Path:
    """`out_dir / relative`, refused in one line unless it resolves (symlinks followed)
    to a path strictly inside `out_dir`."""
    out_dir = Path(out_dir)
    root = out_dir.resolve()
    path = out_dir / relative
    resolved = path.resolve()
    if resolved == root or not resolved.is_relative_to(root):
        raise ValueError(f"{relative!r} would be written to {resolved}, outside the output folder {str(out_dir)!r}")
    return path
