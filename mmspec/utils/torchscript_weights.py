"""The tensors of a TorchScript archive, read without running it.

`torch.jit.load` compiles and runs the Python code an archive carries (its `code/`), so a
published `.jit` file (Cosmos' tokenizers) is read here instead: `data.pkl` is unpickled by
a reader that builds nothing but tensors (their storages read from `data/N`), plain
ordered dicts and one inert attribute holder per TorchScript class, and refuses every other
global.
"""

from __future__ import annotations

import collections
import os
import pickle
import zipfile

import torch

from mmspec.utils.checkpoint import first_line


class _Inert:
    """What every TorchScript class of an archive becomes: a bag of its attributes."""

    def __setstate__(self, state):
        if not isinstance(state, dict):
            raise pickle.UnpicklingError(f"a module's state should be a dict of attributes, got {type(state).__name__}")
        self.__dict__.update(state)


STORAGE_DTYPES = {
    "FloatStorage": torch.float32, "DoubleStorage": torch.float64, "HalfStorage": torch.float16,
    "BFloat16Storage": torch.bfloat16, "LongStorage": torch.int64, "IntStorage": torch.int32,
    "ShortStorage": torch.int16, "CharStorage": torch.int8, "ByteStorage": torch.uint8, "BoolStorage": torch.bool,
}


def _rebuild_tensor(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):
    """`torch._utils._rebuild_tensor_v2`'s arguments; a view of the storage, copied."""
    if not isinstance(storage, torch.Tensor):
        raise pickle.UnpicklingError("a tensor of the archive names no storage")
    return storage.as_strided(tuple(size), tuple(stride), offset).clone()


class _TorchScriptUnpickler(pickle.Unpickler):
    """Builds tensors, inert module holders and plain containers; refuses everything else."""

    def __init__(self, file, archive: zipfile.ZipFile, prefix: str):
        super().__init__(file)
        self.archive, self.prefix, self.inert = archive, prefix, {}

    def find_class(self, module: str, name: str):
        if module == "__torch__" or module.startswith("__torch__."):
            # one holder class per TorchScript class name; its methods (the archive's code) are never read
            return self.inert.setdefault(f"{module}.{name}", type(name, (_Inert,), {}))
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in STORAGE_DTYPES:
            return name
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        raise pickle.UnpicklingError(f"the archive asks for {module}.{name}, which a weights reader does not build")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and pid[1] in STORAGE_DTYPES):
            raise pickle.UnpicklingError(f"unknown persistent id {str(pid)[:80]}")
        _, kind, key, _location, numel = pid
        data = bytearray(self.archive.read(f"{self.prefix}data/{key}"))
        dtype = STORAGE_DTYPES[kind]
        if len(data) != numel * torch.empty((), dtype=dtype).element_size():
            raise pickle.UnpicklingError(f"storage {key} holds {len(data)} bytes, not {numel} {dtype}")
        return torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)


def _flatten(obj, prefix: str, out: dict, seen: set) -> None:
    if id(obj) in seen:
        return
    seen.add(id(obj))
    for name, value in vars(obj).items():
        if isinstance(value, torch.Tensor):
            out[prefix + name] = value
        elif isinstance(value, _Inert):
            _flatten(value, f"{prefix}{name}.", out, seen)


def read_torchscript_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The tensors of a TorchScript archive (`torch.jit.save`'s zip), by their module path, as
    `ScriptModule.state_dict()` names them, without running anything the archive holds.

    `data.pkl` is unpickled by a reader that knows only tensors (their storages read from
    `data/N`) and turns each `__torch__` class into an inert holder of its attributes; the
    archive's `code/` is never opened.

    Example:
        >>> state = read_torchscript_state_dict("Cosmos-Tokenize1-DV8x16x16-720p/decoder.jit")  # doctest: +SKIP
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"TorchScript archive {path!r} does not exist or is not a file")
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith("/data.pkl")]
            if len(pickles) != 1:
                raise ValueError(f"{path} is not a TorchScript archive: it holds {len(pickles)} top-level data.pkl")
            prefix = pickles[0][: -len("data.pkl")]
            with archive.open(pickles[0]) as file:
                root = _TorchScriptUnpickler(file, archive, prefix).load()
    except (zipfile.BadZipFile, pickle.UnpicklingError, KeyError, EOFError, TypeError, AttributeError, IndexError,
            RuntimeError) as err:  # what a damaged or hostile pickle raises
        raise ValueError(f"{path} is not a readable TorchScript archive ({first_line(err)})") from None
    if not isinstance(root, _Inert):
        raise ValueError(f"{path} holds a {type(root).__name__}, not a TorchScript module")
    state: dict[str, torch.Tensor] = {}
    _flatten(root, "", state, set())
    return state
