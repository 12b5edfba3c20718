"""Declared components: the `[module, class]` a saved `model_index.json` gives a component is
only checked against the declared class, old module paths mapped by `MOVED_MODULES`."""

from pathlib import Path

import pytest

from mmspec.pipelines.components import MOVED_MODULES, check_entry, own_module, transformers_model
from mmspec.pipelines.llamagen import LlamaGenPipeline
from mmspec.tokenizers.llamagen_vq import LlamaGenVQ, VQConfig

WHERE = Path("saved/model_index.json")


def test_the_declared_entry_is_module_and_class():
    assert own_module(LlamaGenVQ, VQConfig, "VQ").entry == ["mmspec.tokenizers.llamagen_vq", "LlamaGenVQ"]
    assert transformers_model("OPTForCausalLM").entry == ["transformers", "OPTForCausalLM"]


def test_the_declared_entry_passes_and_a_tuple_too():
    component = LlamaGenPipeline.declared_components["vqvae"]
    check_entry(["mmspec.tokenizers.llamagen_vq", "LlamaGenVQ"], component, "vqvae", WHERE)
    check_entry(("mmspec.tokenizers.llamagen_vq", "LlamaGenVQ"), component, "vqvae", WHERE)


def test_an_old_module_path_counts_as_its_new_one(monkeypatch):
    component = LlamaGenPipeline.declared_components["vqvae"]
    with pytest.raises(ValueError, match="names the vqvae component as"):
        check_entry(["mmspec.old_place", "LlamaGenVQ"], component, "vqvae", WHERE)
    monkeypatch.setitem(MOVED_MODULES, "mmspec.old_place", "mmspec.tokenizers.llamagen_vq")
    check_entry(["mmspec.old_place", "LlamaGenVQ"], component, "vqvae", WHERE)
    with pytest.raises(ValueError, match="names the vqvae component as"):  # the class must still match
        check_entry(["mmspec.old_place", "LlamaGenGPT"], component, "vqvae", WHERE)


def test_every_moved_module_maps_to_a_module_a_pipeline_declares():
    import importlib

    from mmspec import PIPELINES

    declared = {component.module for name, module in PIPELINES.items()
                for component in getattr(importlib.import_module(module), name).declared_components.values()}
    assert set(MOVED_MODULES.values()) <= declared
