"""Reading a saved pipeline's files: its `model_index.json`, the dtype `from_pretrained` casts
to, transformers folders (their sizes checked before transformers builds anything, their
errors cut to one line) and mmspec's own modules (`config.json` + `model.safetensors`)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import torch

from mmspec.core.bounds import check_config_sizes
from mmspec.utils.checkpoint import check_fits_memory, first_line
from mmspec.utils.json_files import read_json, write_json


def read_index(root: str | Path, cls: type) -> tuple[Path, dict]:
    """The saved pipeline folder (or a shipped model's, by name) and its `model_index.json`,
    checked to name `cls`."""
    from mmspec.assets import pipeline_path

    root = pipeline_path(root)
    if not root.is_dir():
        raise ValueError(f"{root} is not a directory holding a saved pipeline")
    index = read_json(root / "model_index.json", "pipeline")
    if index.get("_class_name") != cls.__name__:
        raise ValueError(f"{root} holds a {index.get('_class_name')!r} pipeline, not a {cls.__name__}")
    return root, index


def pop_dtype(cls: type, kwargs: dict) -> torch.dtype | None:
    """The dtype `from_pretrained(**kwargs)` casts the weights to: `torch_dtype=` (diffusers)
    or `dtype=` (transformers 5). Any other keyword is refused, not ignored."""
    given = {k: kwargs.pop(k) for k in ("torch_dtype", "dtype") if k in kwargs}
    if kwargs:
        raise ValueError(f"{cls.__name__}.from_pretrained got unknown keyword(s) {', '.join(kwargs)}; it takes torch_dtype")
    if len(given) > 1:
        raise ValueError("give torch_dtype or dtype, not both")
    return as_dtype(next(iter(given.values()), None))


def as_dtype(dtype) -> torch.dtype | None:
    """A floating `torch.dtype`, given as one or by its name ("float16", "torch.bfloat16"),
    as diffusers and transformers take `torch_dtype`."""
    if isinstance(dtype, str):
        named = getattr(torch, dtype.removeprefix("torch."), None)
        dtype = named if isinstance(named, torch.dtype) else dtype
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"torch_dtype must be a floating torch.dtype such as torch.bfloat16 or its name ('bfloat16'), got {dtype!r}")
    return dtype


DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def transformers_weight_count(config: dict, where: str) -> int:
    """About the weights of a transformers model of `config` (a `config.json` as a dict):
    per block of every (nested) config 4 h^2 of attention and 3 h x ffn of MLP, and the
    embedding and output tables. Sizes and head counts that are not whole numbers within
    `mmspec.core.bounds.CONFIG_SIZE_CAPS` are refused, naming `where` and the key."""
    check_config_sizes(config, where)
    return _weight_count(config)


def _weight_count(config: dict) -> int:
    h = config.get("hidden_size") or 0
    ffn = config.get("intermediate_size") or config.get("ffn_dim") or 4 * h
    count = (config.get("num_hidden_layers") or 0) * (4 * h * h + 3 * h * ffn)
    count += (2 * (config.get("vocab_size") or 0) * (config.get("num_codebooks") or 1) + (config.get("max_position_embeddings") or 0)) * h
    return count + sum(_weight_count(sub) for sub in config.values() if isinstance(sub, dict))


def check_transformers_config(folder: str | Path, dtype: torch.dtype | None) -> None:
    """A transformers folder's `config.json`, refused in one line when its sizes are not
    whole numbers or its weights would not fit the machine's memory: transformers would
    build the model first (10**9 layers: minutes of growing memory) and fail late."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return  # a hub name, or no model: transformers says what is missing
    config = read_json(path, "transformers model")
    saved = config.get("torch_dtype") or config.get("dtype")
    itemsize = dtype.itemsize if dtype is not None else DTYPE_BYTES.get(saved, 4) if isinstance(saved, str) else 4
    check_fits_memory(transformers_weight_count(config, str(path)) * itemsize, f"the model of {path}",
                      "check the sizes in its config.json")


def load_transformers(load: Callable, folder: str | Path, **kwargs):
    """`load(folder, **kwargs)` (a transformers `from_pretrained`), its multi-line errors (an
    `UnpicklingError` from `weights_only=True`, a damaged safetensors file) cut to one line
    that names the folder. transformers loads `.bin` files with `weights_only=True`. A
    model's `config.json` is checked first (`check_transformers_config`)."""
    from safetensors import SafetensorError

    check_transformers_config(folder, kwargs.get("dtype"))
    try:
        return load(folder, **kwargs)
    except pickle.UnpicklingError:  # its text suggests weights_only=False, which would run the code
        raise ValueError(f"cannot load {folder}: a pickled file there needs arbitrary unpickling; mmspec refuses to "
                         "execute code from a checkpoint: re-save it as safetensors") from None
    except (SafetensorError, OSError, RuntimeError) as err:
        raise ValueError(f"cannot load {folder}: {first_line(err)}") from None


def save_module(folder: Path, module: torch.nn.Module, config: dict) -> None:
    """One of mmspec's own modules as `folder/config.json` and `folder/model.safetensors`."""
    from safetensors.torch import save_file

    write_json(folder / "config.json", config)
    save_file({k: v.detach().contiguous().cpu() for k, v in module.state_dict().items()}, str(folder / "model.safetensors"))


def load_module(folder: Path, model_cls, config_cls, what: str):
    """What `save_module` wrote: `model_cls.from_checkpoint` with its `config_cls` from JSON,
    its sizes (`size_keys`) held to `mmspec.core.bounds`' caps and its types checked, naming
    the file, and its size held to the machine's memory before the module is built (a
    config's own `weight_count`, else the module counted on the meta device)."""
    path = folder / "config.json"
    values = read_json(path, what)
    check_config_sizes(values, str(path), config_cls.size_keys)
    try:
        config = config_cls.from_dict(values)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    if config.weight_count() is not None:
        config.check_size()
    else:
        try:
            with torch.device("meta"):
                module = model_cls(config)
        except (RuntimeError, NotImplementedError):
            module = None  # a constructor that computes on its tensors (mel filterbanks); its sizes are widths, not depths
        if module is not None:
            count = sum(t.numel() for t in [*module.parameters(), *module.buffers()])
            check_fits_memory(4 * count, f"the {what} in {folder}", "check the sizes in its config.json")
    return model_cls.from_checkpoint(folder / "model.safetensors", config)

