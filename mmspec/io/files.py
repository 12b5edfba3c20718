"""Files written so that nothing is lost: a check that a folder can be written before any
work, and atomic writes (a reader sees the old file or the whole new one)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path


# the longest file or folder name Linux file systems take (os.pathconf's PC_NAME_MAX)
NAME_MAX_BYTES = 255


def check_name_lengths(path: Path) -> None:
    """Refuses a path with a name longer than `NAME_MAX_BYTES` (`stat` itself fails on it)."""
    too_long = next((part for part in Path(path).parts if len(os.fsencode(part)) > NAME_MAX_BYTES), None)
    if too_long is not None:
        raise ValueError(f"output name {too_long[:40]!r}... is {len(os.fsencode(too_long))} bytes long; "
                         f"file systems take names of at most {NAME_MAX_BYTES} bytes")


def check_writable(out_dir: Path) -> None:
    """Proves that `out_dir` can be created (if missing) and written, creating nothing: a
    file is written and deleted in its nearest existing ancestor."""
    out_dir = Path(out_dir)
    check_name_lengths(out_dir)
    existing = next(p for p in (out_dir, *out_dir.absolute().parents) if p.exists())
    if not existing.is_dir():
        raise ValueError(f"output directory {str(out_dir)!r} is not writable: {existing} is a file")
    try:
        probe = existing / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"output directory {str(out_dir)!r} is not writable: {err.strerror}") from None


def temporary_name(path: Path) -> Path:
    """Where `atomic_write` writes `path` first: `.{name}.{pid}.tmp` beside it."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


# a temporary file of `atomic_write`: group 1 is the name of the file it was to become
TEMPORARY = re.compile(r"\.(.+)\.[0-9]+\.tmp")


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """`write(tmp)` then renames tmp to `path`: readers see the old file or the whole new
    one. The temporary file never outlives a failure (a killed process leaves it, and the
    next run of the item deletes it)."""
    tmp = temporary_name(Path(path))
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
