"""Declared components: the `[module, class]` a saved `model_index.json` gives a component is
only checked against the declared class, old module paths mapped by `MOVED_MODULES`."""

from pathlib import Path

import pytest

from mmspec.models import MOVED_MODULES
from mmspec.pipelines.components import check_entry, own_module, transformers_model
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


@pytest.mark.parametrize("old, new", sorted(MOVED_MODULES.items()))
def test_a_moved_module_imports_by_its_old_path_as_the_same_module(old, new):
    import importlib

    assert importlib.import_module(old) is importlib.import_module(new)


def test_the_shipped_assets_name_the_new_paths_and_old_folders_load(tmp_path):
    """The shipped `model_index.json` files name today's modules; a folder saved before
    `mmspec/models` was split (its entries naming `mmspec.models.llamagen`) loads the same."""
    import json

    import torch

    from mmspec.assets import DEFAULT_ASSETS, SHIPPED_PIPELINES, pipeline_path
    from mmspec.pipelines import load_pipeline

    for name in SHIPPED_PIPELINES:
        index = json.loads((pipeline_path(name) / "model_index.json").read_text())
        modules = [entry[0] for entry in index.values() if isinstance(entry, list) and len(entry) == 2]
        assert not set(modules) & set(MOVED_MODULES), name
    pipe = load_pipeline(DEFAULT_ASSETS)
    pipe.save_pretrained(tmp_path)
    path = tmp_path / "model_index.json"
    index = json.loads(path.read_text())
    assert index["transformer"] == ["mmspec.models.networks.llamagen", "LlamaGenGPT"]
    path.write_text(json.dumps({**index, "transformer": ["mmspec.models.llamagen", "LlamaGenGPT"]}))
    loaded = load_pipeline(tmp_path)
    kwargs = dict(class_labels=[0], decoding="ar", output_type="tokens")
    assert torch.equal(pipe(generator=torch.Generator().manual_seed(0), **kwargs).images,
                       loaded(generator=torch.Generator().manual_seed(0), **kwargs).images)
