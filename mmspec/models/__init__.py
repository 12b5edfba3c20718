"""The models the engine decodes, each as a `TokenModel`: `networks/` (our own, checkpoint-
compatible networks), `adapters/` (transformers models, unmodified) and `cache/` (the static
KV cache and the transformers glue they share).

Modules imported by their paths from before this split (`mmspec.models.llamagen`) are the
modules at their new paths (`MOVED_MODULES`); saved pipelines name classes by those old
paths in `model_index.json` too (`mmspec.pipelines.components.check_entry`).
"""

import importlib
import importlib.abc
import importlib.util
import sys

# the old path of every module that moved -> its path now
MOVED_MODULES = {
    "mmspec.models.llamagen": "mmspec.models.networks.llamagen",
    "mmspec.models.video_llamagen": "mmspec.models.networks.video_llamagen",
    "mmspec.models.lpd": "mmspec.models.networks.lpd",
    "mmspec.models.captioner": "mmspec.models.networks.captioner",
    "mmspec.models.emu3": "mmspec.models.adapters.emu3",
    "mmspec.models.janus": "mmspec.models.adapters.janus",
    "mmspec.models.chameleon": "mmspec.models.adapters.chameleon",
    "mmspec.models.musicgen": "mmspec.models.adapters.musicgen",
    "mmspec.models.transformers_lm": "mmspec.models.adapters.transformers_lm",
    "mmspec.models.mesh_opt": "mmspec.models.adapters.mesh_opt",
    "mmspec.models.kv_cache": "mmspec.models.cache.kv_cache",
    "mmspec.models.hf_session": "mmspec.models.cache.hf_session",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a module by its old path as the one module at its new path (one module
    object under both names, so its classes are the same classes)."""

    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED_MODULES else None

    def create_module(self, spec):
        return None  # a blank module, replaced in exec_module

    def exec_module(self, module) -> None:
        # the import system returns what sys.modules holds under the name after this call
        sys.modules[module.__name__] = importlib.import_module(MOVED_MODULES[module.__name__])


if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(MovedModuleFinder())
