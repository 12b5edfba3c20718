"""The cost of one forward on this hardware, by inputs per row: what auto divides by.

A Jacobi forward over n inputs per row costs more than a one-token forward, and how much
more belongs to the device: on a 2-core CPU a 17-input forward of the shipped image model
costs about 1.5x a 1-input one, on a GPU about 1x up to a few hundred inputs. The curve is
measured once per (model, device, dtype, torch version, thread count, cache rows) by timing
forwards of a live session at positions nothing has committed yet (the contract lets them
hold anything: they are never attended, and the decode overwrites them), and kept as JSON
in the user's cache folder (`MMSPEC_CACHE_DIR`, else `$XDG_CACHE_HOME/mmspec`, else
`~/.cache/mmspec`), under a key that changes with any of those.
"""

from __future__ import annotations

import hashlib
import json
import math
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from mmspec.core.device import DeviceProfile
from mmspec.decoding.steps import forward_steps

logger = logging.getLogger(__name__)

SIZES = (1, 2, 3, 5, 9, 17, 25, 33, 49, 65)  # inputs per row: window w feeds w + 1
TREE_SIZES = (129, 257, 513, 1025)  # branch nodes come by the hundred


@dataclass
class CostCurve:
    """Seconds per forward at `inputs` per row (ascending), for `rows` cache rows.

    Attributes:
        inputs (`list[int]`), seconds (`list[float]`): the measured points.
        rows (`int`): cache rows of the forward (CFG rows included).
        key (`str`): what it was measured for (see `cost_key`).
        measured (`bool`): False for the flat curve of `cost="off"`.
    """

    inputs: list[int]
    seconds: list[float]
    rows: int
    key: str = ""
    measured: bool = True

    def __call__(self, n: float) -> float:
        """Seconds for a forward of n inputs per row: linear between points, and along the
        last segment past the last point."""
        xs, ys = self.inputs, self.seconds
        if len(xs) == 1:
            return ys[0]
        i = next((k for k in range(1, len(xs)) if n <= xs[k]), len(xs) - 1)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return max(y0 + (y1 - y0) * (n - x0) / (x1 - x0), 0.0)

    def relative(self) -> dict[int, float]:
        """Cost at each measured size over the one-input cost (what tables show)."""
        return {x: y / self(1) for x, y in zip(self.inputs, self.seconds)}

    @classmethod
    def flat(cls, rows: int) -> "CostCurve":
        """Every size costs one unit: auto then maximises tokens per forward."""
        return cls([1], [1.0], rows, key="flat", measured=False)


def networks(model, depth: int = 2) -> list:
    """The torch modules behind a TokenModel: itself, or those an adapter holds (a
    transformers model inside `MeshXLModel`'s `TransformersLM`, say)."""
    if isinstance(model, torch.nn.Module):
        return [model]
    found = []
    if depth:
        for value in vars(model).values() if hasattr(model, "__dict__") else ():
            if not isinstance(value, (torch.Tensor, str, int, float)):
                found += [net for net in networks(value, depth - 1) if all(net is not f for f in found)]
    return found


def model_device(model) -> torch.device:
    first = next((p for net in networks(model) for p in net.parameters()), None)
    return torch.device("cpu") if first is None else first.device


def model_dtype(model):
    first = next((p for net in networks(model) for p in net.parameters()), None)
    return None if first is None else first.dtype


def cache_dir() -> Path:
    base = os.environ.get("MMSPEC_CACHE_DIR")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mmspec"


def model_fingerprint(model) -> str:
    """The adapter's class, and each network's class, config (its JSON, or repr) and
    parameter shapes."""
    parts = [type(model).__qualname__]
    for net in networks(model):
        config = getattr(net, "config", None)
        to_dict = getattr(config, "to_dict", None)
        described = json.dumps(to_dict(), sort_keys=True, default=str) if callable(to_dict) else repr(config)
        parts.append(f"{type(net).__qualname__}|{described}|{[tuple(p.shape) for p in net.parameters()]}")
    return "\n".join(parts)


def cost_key(model, rows: int, profile: DeviceProfile, dtype, length: int) -> str:
    """A short hash of everything the curve depends on; `length` is the sequence the cache
    holds (attention reads every slot)."""
    parts = [model_fingerprint(model), profile.cost_key(), str(dtype), torch.__version__, f"rows={rows}", f"length={length}"]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def measure(session, K: int, sizes: list[int], *, rows: int, key: str, profile: DeviceProfile, rounds: int = 3) -> CostCurve:
    """Times forwards of `session` at each of `sizes` inputs per row, at positions 0..n-1
    (none committed: the session is fresh from its prefill), and commits nothing. Sizes
    are interleaved over `rounds` after a warm-up round and each keeps its fastest time,
    so that a burst of load from elsewhere spoils one sample rather than one size."""
    device = session.prefill_logits().cond.device
    B = session.batch_size
    sync = profile.synchronize
    best = [float("inf")] * len(sizes)
    for round_ in range(rounds + 1):
        for i, n in enumerate(sizes):
            tokens = torch.zeros(B, n, K, dtype=torch.long, device=device)
            positions = torch.arange(n, device=device).expand(B, n)
            sync()
            start = time.perf_counter()
            forward_steps(session, tokens, positions)
            sync()
            if round_:
                best[i] = min(best[i], time.perf_counter() - start)
    for i in range(1, len(best)):  # cost never falls with size
        best[i] = max(best[i], best[i - 1])
    return CostCurve(list(sizes), best, rows, key)


def curve_path(key: str) -> Path:
    return cache_dir() / "cost" / f"{key}.json"


def load_curve(key: str) -> CostCurve | None:
    path = curve_path(key)
    try:
        data = json.loads(path.read_text())
        curve = CostCurve(**{k: data[k] for k in ("inputs", "seconds", "rows", "key", "measured")})
        if not curve.seconds or len(curve.seconds) != len(curve.inputs) or not all(
                isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in curve.seconds):
            raise ValueError("its seconds must be finite and positive, one per size")
        return curve
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:  # a damaged file is measured again
        logger.warning("ignoring the cost curve %s (%s); measuring again", path, err)
        return None


def save_curve(curve: CostCurve) -> None:
    """Writes the curve atomically (a killed run leaves the old file or none)."""
    path = curve_path(curve.key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(asdict(curve), indent=1))
        os.replace(tmp, path)
    except OSError as err:  # a read-only home still decodes; it measures again next time
        logger.warning("could not cache the cost curve at %s (%s)", path, err)


def session_curve(session, model, K: int, length: int, capacity: int, *, mode: str, tree: bool,
                  profile: DeviceProfile) -> CostCurve:
    """The cost curve of the forward of `session` (a started model session): read from the
    cache, or measured (and cached) when missing or `mode == "refresh"`; flat when
    `mode == "off"`. `capacity` bounds the sizes measured (positions the session has room for)."""
    rows = session.batch_size * (2 if session.guided else 1)
    if mode == "off":
        return CostCurve.flat(rows)
    key = cost_key(model, rows, profile, model_dtype(model), length)
    curve = None if mode == "refresh" else load_curve(key)
    sizes = [n for n in SIZES + (TREE_SIZES if tree else ()) if n <= capacity]
    if curve is None or curve.inputs[-1] < sizes[-1]:
        logger.info("measuring the forward's cost curve (%d sizes, %d rows)", len(sizes), rows)
        curve = measure(session, K, sizes, rows=rows, key=key, profile=profile)
        save_curve(curve)
    return curve
