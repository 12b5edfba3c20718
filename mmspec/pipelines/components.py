"""What a pipeline is made of: each component it declares, the class `model_index.json` names
for it (`[module, class]`, as diffusers writes it) and how it is saved to and loaded from its
own subfolder.

A pipeline loads the classes it declares, never one a file names: the `[module, class]` a
saved `model_index.json` gives a component is only checked against the declared one (after
`mmspec.models.MOVED_MODULES` maps the old paths of modules that have moved, so folders
saved before a move still load), so nothing read from a folder chooses the code that runs.
Weights load with `weights_only=True` or from safetensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from mmspec.models import MOVED_MODULES
from mmspec.pipelines.loading import load_module, load_transformers, save_module
from mmspec.utils.checkpoint import check_finite


@dataclass(frozen=True)
class Component:
    """One declared component of a pipeline.

    Args:
        module (`str`): where its class lives, as `model_index.json` records it ("transformers"
            for a transformers class).
        name (`str`): the class's name.
        load (`Callable[[Path, torch.dtype | None], Any]`): builds it from its subfolder; the
            dtype is `from_pretrained`'s `torch_dtype` (None: as saved).
        save (`Callable[[Any, Path], None]`): writes it to its subfolder.
    """

    module: str
    name: str
    load: Callable[[Path, torch.dtype | None], Any]
    save: Callable[[Any, Path], None]

    @property
    def entry(self) -> list[str]:
        """`[module, class]`, as `model_index.json` names the component."""
        return [self.module, self.name]


def own_module(model_cls: type, config_cls: type, what: str) -> Component:
    """One of mmspec's modules, as `config.json` (its config's `to_dict()`) and
    `model.safetensors`, loaded by `load_module` in float32."""
    return Component(model_cls.__module__, model_cls.__name__,
                     load=lambda folder, dtype: load_module(folder, model_cls, config_cls, what),
                     save=lambda module, folder: save_module(folder, module, module.config.to_dict()))


def self_saving(cls: type) -> Component:
    """A class with its own `save_pretrained(folder)` and `from_pretrained(folder)` (the mel
    codec, Meta's VQGAN), loaded in float32."""
    return Component(cls.__module__, cls.__name__, load=lambda folder, dtype: cls.from_pretrained(folder),
                     save=lambda value, folder: value.save_pretrained(folder))


def transformers_model(name: str, load: Callable | None = None, **kwargs) -> Component:
    """A transformers model, saved as transformers saves it and loaded by `name`'s
    `from_pretrained` (or `load(folder, **kwargs)`), cast to the dtype when given; its
    weights are checked finite and it is put in eval mode."""

    def load_model(folder: Path, dtype: torch.dtype | None):
        if load is None:  # transformers' own class: never the code a folder's auto_map names
            import transformers

            from_pretrained = partial(getattr(transformers, name).from_pretrained, trust_remote_code=False)
        else:
            from_pretrained = load
        model = load_transformers(from_pretrained, folder, **kwargs, **({} if dtype is None else {"dtype": dtype}))
        check_finite(model.named_parameters(), str(folder))
        return model.eval()

    return Component("transformers", name, load=load_model, save=lambda model, folder: model.save_pretrained(folder))


def transformers_processor(name: str) -> Component:
    """A transformers tokenizer or processor, saved as transformers saves it; loaded without
    the custom code a folder's `auto_map` may name."""

    def load_processor(folder: Path, dtype: torch.dtype | None):
        import transformers

        return load_transformers(partial(getattr(transformers, name).from_pretrained, trust_remote_code=False), folder)

    return Component("transformers", name, load=load_processor, save=lambda processor, folder: processor.save_pretrained(folder))


def check_entry(entry: Any, component: Component, name: str, where: Path) -> None:
    """A component's `[module, class]` from `model_index.json`, refused in one line unless it
    names the declared class (a moved module's old path counts as its new one)."""
    if isinstance(entry, (list, tuple)) and len(entry) == 2 and all(isinstance(part, str) for part in entry):
        module, class_name = entry
        if [MOVED_MODULES.get(module, module), class_name] == component.entry:
            return
    raise ValueError(f"{where} names the {name} component as {entry!r}; this pipeline loads it only as "
                     f"{component.entry!r} (mmspec never imports a class that a file names)")

