"""Safe loading of checkpoint files into modules.

Nothing from a file is executed: `.pt` files go through `torch.load(weights_only=True)`
(with `argparse.Namespace` allowed, since original training scripts store their `args`
that way and rebuilding one runs no code), `.safetensors` through safetensors. Every
tensor is matched by name and shape against the module before anything is copied.
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import asdict, fields

import torch
from torch import nn

StateDict = dict[str, torch.Tensor]

# where training scripts of LlamaGen and friends nest the weights
CONTAINER_KEYS = ("model", "module", "state_dict")


def read_state_dict(path_or_state_dict: str | os.PathLike | Mapping, container_key: str | None = None) -> StateDict:
    """Returns the bare state dict of a checkpoint file or an already loaded dict.

    Args:
        path_or_state_dict (`str`, `PathLike` or `dict`): a `.pt`/`.pth`/`.bin` file, a
            `.safetensors` file, or a loaded dict.
        container_key (`str`, *optional*): the key holding the weights (`"ema"` for EMA
            weights, say). By default a bare state dict is used as it is, else the first
            of `model`, `module`, `state_dict` present.
    """
    if isinstance(path_or_state_dict, Mapping):
        obj = dict(path_or_state_dict)
        source = "the given state dict"
    else:
        path = os.fspath(path_or_state_dict)
        source = path
        if not os.path.isfile(path):
            raise ValueError(f"checkpoint {path!r} does not exist or is not a file")
        if path.endswith(".safetensors"):
            obj = _load_safetensors(path)
        else:
            obj = _torch_load_weights_only(path)
    if not isinstance(obj, Mapping):
        raise ValueError(f"{source} holds a {type(obj).__name__}, not a state dict")
    if container_key is not None:
        if container_key not in obj:
            raise ValueError(f"{source} has no {container_key!r} entry; it has {', '.join(map(str, obj))}")
        obj = obj[container_key]
    elif not _is_state_dict(obj):
        found = next((k for k in CONTAINER_KEYS if k in obj and _is_state_dict(obj[k])), None)
        if found is None:
            raise ValueError(
                f"{source} is neither a bare state dict nor holds one under {', '.join(CONTAINER_KEYS)}; "
                f"its keys are {', '.join(map(str, list(obj)[:10]))}"
            )
        obj = obj[found]
    if not _is_state_dict(obj):
        raise ValueError(f"the weights in {source} are not a mapping of names to tensors")
    check_finite(obj.items(), source)
    return dict(obj)


def check_finite(named_tensors: Iterable[tuple[str, torch.Tensor]], source: str) -> None:
    """Refuses weights holding NaN or infinity: such a model loads and runs, but it
    generates one token everywhere (or noise), with nothing to say why."""
    for name, tensor in named_tensors:
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise ValueError(f"{source} is corrupt: its tensor {name!r} holds NaN or infinite values")


def _is_state_dict(obj) -> bool:
    return isinstance(obj, Mapping) and len(obj) > 0 and all(isinstance(v, torch.Tensor) for v in obj.values())


def first_line(err: BaseException) -> str:
    """The first line of an error's message: ours are one line, and many libraries' are not."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def _load_safetensors(path: str) -> StateDict:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path, device="cpu")
    except SafetensorError as err:  # its messages name no file
        raise ValueError(f"{path} is not a readable safetensors file (truncated or damaged: {first_line(err)})") from None


def _torch_load_weights_only(path: str):
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # torch's text advises weights_only=False, which would run the file's code
        raise ValueError(
            f"{path} holds objects other than tensors and needs arbitrary unpickling to load; mmspec refuses to execute "
            f"code from a checkpoint. Re-save its state dict alone (torch.save(ckpt['model'], ...)) or as safetensors."
        ) from None


def load_into(
    module: nn.Module,
    state_dict: StateDict,
    *,
    rename: Mapping[str, str] | None = None,
    ignore: Iterable[str] = (),
    what: str = "checkpoint",
) -> None:
    """Copies `state_dict` into `module` after checking every name and shape.

    Args:
        rename: maps a checkpoint key prefix to the module's prefix (applied before matching).
        ignore: checkpoint key suffixes that are dropped (buffers that only the training code
            used, such as `freqs_cis` or usage counters).
        what: how errors name the checkpoint ("LlamaGen GPT checkpoint").
    """
    rename = rename or {}
    ignore = tuple(ignore)
    incoming: StateDict = {}
    for key, value in state_dict.items():
        if ignore and key.endswith(ignore):
            continue
        for old, new in rename.items():
            if key.startswith(old):
                key = new + key[len(old):]
                break
        incoming[key] = value

    expected = module.state_dict()
    missing = [k for k in expected if k not in incoming]
    unexpected = [k for k in incoming if k not in expected]
    mismatched = [
        f"{k} {tuple(incoming[k].shape)} vs {tuple(expected[k].shape)} expected"
        for k in expected
        if k in incoming and incoming[k].shape != expected[k].shape
    ]
    problems = []
    if missing:
        problems.append(f"missing keys: {_short(missing)}")
    if unexpected:
        problems.append(f"unexpected keys: {_short(unexpected)}")
    if mismatched:
        problems.append(f"shape mismatch: {_short(mismatched)}")
    if problems:
        raise ValueError(f"{what} does not fit the config: " + "; ".join(problems))
    with torch.no_grad():
        for key, target in expected.items():
            target.copy_(incoming[key])


def _short(items: list[str], limit: int = 5) -> str:
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


class FromCheckpoint:
    """`from_checkpoint(path_or_state_dict, config)`: a module of `config` with the weights of a
    `.safetensors` or `.pt` file or a state dict, in eval mode; `checkpoint_name` names the
    checkpoint in load errors."""

    checkpoint_name = "checkpoint"

    @classmethod
    def from_checkpoint(cls, path_or_state_dict, config):
        model = cls(config)
        load_into(model, read_state_dict(path_or_state_dict), what=cls.checkpoint_name)
        return model.eval()


class DeviceDtypeMixin:
    """`device` and `dtype` of a module's weights, as diffusers' `ModelMixin` has them:
    `DiffusionPipeline.to`, `.device` and `.dtype` read them from every component."""

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype


def machine_memory_bytes() -> int:
    """The machine's physical memory: what no config may ask more than."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits_memory(num_bytes: int, what: str, way_out: str) -> None:
    """Refuses, in one line and before anything is allocated, `num_bytes` that exceed the
    machine's memory (a config with `n_layer` 10**9 would otherwise grow until it is killed)."""
    total = machine_memory_bytes()
    if num_bytes > total:
        raise ValueError(f"{what} needs {num_bytes / 2**30:,.1f} GiB, more than this machine's {total / 2**30:.1f} GiB of memory; "
                         f"{way_out}")


def _type_name(hint) -> str:
    if hint is type(None):
        return "null"
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if typing.get_origin(hint) is list:
        return f"a list of {_type_name(args[0])}" if args else "a list"
    return {int: "a whole number >= 0", float: "a number", bool: "true or false", str: "a string"}.get(hint, getattr(hint, "__name__", str(hint)))


def _matches(value, hint) -> bool:
    """Whether a JSON value has the field's declared type: `"6"` is no int, `true` no
    number, and counts are never negative."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if origin is list:
        return isinstance(value, list) and all(_matches(v, args[0]) for v in value) if args else isinstance(value, list)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    return True  # a type JSON cannot spell; the config's own checks judge it


class JSONConfig:
    """`from_dict` / `to_dict` for the dataclass configs saved as JSON beside the weights.
    Subclasses are dataclasses and set `config_name` for error messages. `from_dict`
    checks every value against its field's type (`"n_layer": "6"` is refused, not a
    `TypeError` deep in a constructor); a subclass whose module's size follows from its
    fields gives `weight_count()`, which `check_size` holds to the machine's memory, and
    names its sizes in `size_keys` (field: kind of `mmspec.core.bounds.CONFIG_SIZE_CAPS`),
    which a saved folder's loader holds to 1..cap before `from_dict` (0 heads divide by zero)."""

    config_name = "config"
    size_keys: typing.ClassVar[dict[str, str]] = {}

    @classmethod
    def from_dict(cls, values: dict):
        if not isinstance(values, Mapping):
            raise ValueError(f"a {cls.config_name} is a JSON object of fields, got {type(values).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown {cls.config_name} fields {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        try:
            hints = typing.get_type_hints(cls)
        except (NameError, TypeError):  # an annotation naming a type only a type checker imports: judged by the config itself
            hints = {}
        for name, value in values.items():
            if name in hints and not _matches(value, hints[name]):
                raise ValueError(f"{cls.config_name} field {name!r} must be {_type_name(hints[name])}, got {value!r}")
        try:
            return cls(**values)
        except (ZeroDivisionError, OverflowError) as err:  # a count of 0 or a size past float's range in __post_init__
            raise ValueError(f"this {cls.config_name} has a size that cannot be ({err}); check its fields") from None

    def weight_count(self) -> int | None:
        """Parameters and buffers the module of this config holds (None: not known from
        the fields alone)."""
        return None

    def check_size(self, bytes_per_weight: int = 4) -> None:
        """Refuses (one line) a config whose weights would not fit the machine's memory."""
        count = self.weight_count()
        if count is not None:
            check_fits_memory(count * bytes_per_weight, f"this {self.config_name}", "check its sizes (layers, widths, vocabulary)")

    def to_dict(self) -> dict:
        return asdict(self)
