"""The JSON files of a saved pipeline or model: read with a one-line error naming the file
and what it should have held, written with a trailing newline."""

from __future__ import annotations

import json
from pathlib import Path


def read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise ValueError(f"{path} is missing: not a saved {what}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text (byte {err.start}): not a saved {what}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err})") from None
    except RecursionError:  # utils sits beside core, so not `mmspec.core.bounds.json_value`
        raise ValueError(f"{path} nests its JSON too deep to be a saved {what}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a JSON {type(data).__name__}, not an object: not a saved {what}")
    return data


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
