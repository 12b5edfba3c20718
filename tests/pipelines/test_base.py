"""`MMSpecPipeline`'s generic `save_pretrained` / `from_pretrained`, for every pipeline family:
the shipped models and the tiny transformers pipelines the family tests build."""

import json

import pytest
import torch

from mmspec import PIPELINES
from mmspec.pipelines import load_pipeline
from mmspec.pipelines.base import MMSpecPipeline
from tests.helpers.lumina import fixture_model, tiny_tokenizer, tiny_vqgan
from tests.helpers.tiny_models import EMU3_SIZE, tiny_emu3, tiny_janus

SHIPPED = ["default", "video", "speech", "mesh", "captioner", "lpd"]
TINY = ["emu3", "janus", "lumina"]


def build(name: str) -> MMSpecPipeline:
    if name in SHIPPED:
        return load_pipeline(name)
    from mmspec.pipelines.emu3 import Emu3Pipeline
    from mmspec.pipelines.janus import JanusPipeline
    from mmspec.pipelines.lumina_mgpt import LuminaMGPTPipeline

    if name == "emu3":
        return Emu3Pipeline(*tiny_emu3(), **EMU3_SIZE)
    if name == "janus":
        return JanusPipeline(*tiny_janus())
    return LuminaMGPTPipeline(fixture_model(), tiny_tokenizer(), tiny_vqgan(), height=32, width=32)


def test_every_pipeline_class_is_an_mmspec_pipeline():
    import importlib

    for name, module in PIPELINES.items():
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, MMSpecPipeline), name
        assert cls.declared_components, f"{name} declares no components"


@pytest.mark.parametrize("name", SHIPPED + TINY)
def test_save_load_round_trip_keeps_every_component_and_setting(name, tmp_path):
    pipe = build(name)
    pipe.save_pretrained(tmp_path / "a")
    index = json.loads((tmp_path / "a" / "model_index.json").read_text())
    assert index["_class_name"] == type(pipe).__name__
    for key, component in pipe.declared_components.items():
        saved = getattr(pipe, key) is not None
        assert (key in index) == saved == (tmp_path / "a" / key).is_dir(), key
        if saved:
            assert index[key] == component.entry
    loaded = load_pipeline(tmp_path / "a")
    assert type(loaded) is type(pipe)
    for key in pipe.declared_components:
        before, after = getattr(pipe, key), getattr(loaded, key)
        assert type(before) is type(after), key
        if isinstance(before, torch.nn.Module):
            a, b = before.state_dict(), after.state_dict()
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), key
            assert after.training == before.training, key
    for key, attribute in pipe.config_attributes.items():
        assert getattr(loaded, attribute) == getattr(pipe, attribute), key
    assert getattr(loaded, "metadata", None) == getattr(pipe, "metadata", None)
    loaded.save_pretrained(tmp_path / "b")  # saving again writes the same index
    assert (tmp_path / "b" / "model_index.json").read_text() == (tmp_path / "a" / "model_index.json").read_text()


def test_metadata_travels_and_the_shipped_index_keys_are_read(tmp_path):
    pipe = load_pipeline("default")
    assert pipe.metadata["image_size"] == 64 and "training" in pipe.metadata
    assert "class_names" not in pipe.metadata and "transformer" not in pipe.metadata
    pipe.save_pretrained(tmp_path)
    assert load_pipeline(tmp_path).metadata == pipe.metadata


def test_a_t2i_folder_saved_without_text_encoder_entries_loads(tmp_path):
    """Folders saved before the T5 encoder and tokenizer were named in model_index.json
    (`text_encoder/` and `tokenizer/` beside it, no entries) still load them."""
    from tests.pipelines.test_llamagen_pipeline import tiny_t5

    from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT
    from mmspec.pipelines.llamagen import LlamaGenPipeline
    from tests.helpers.pipelines import tiny_vq

    encoder, tokenizer = tiny_t5()
    gpt = LlamaGenGPT(LlamaGenConfig(dim=32, n_layer=1, n_head=2, vocab_size=32, block_size=16, model_type="t2i",
                                     caption_dim=16, cls_token_num=6)).eval()
    LlamaGenPipeline(gpt, tiny_vq(), encoder, tokenizer).save_pretrained(tmp_path)
    path = tmp_path / "model_index.json"
    index = json.loads(path.read_text())
    assert index["text_encoder"] == ["transformers", "T5EncoderModel"]
    del index["text_encoder"], index["tokenizer"]
    path.write_text(json.dumps(index))
    loaded = LlamaGenPipeline.from_pretrained(tmp_path)
    assert loaded.text_encoder is not None and loaded.tokenizer is not None and loaded.metadata == {}


@pytest.mark.parametrize("entry", [
    ["os", "system"], ["mmspec.models.networks.lpd", "LPD"], ["mmspec.models.networks.llamagen", "LlamaGenConfig"],
    "mmspec.models.networks.llamagen.LlamaGenGPT", ["mmspec.models.networks.llamagen"], None,
])
def test_a_component_named_as_another_class_is_a_one_line_error(entry, tmp_path):
    load_pipeline("default").save_pretrained(tmp_path)
    path = tmp_path / "model_index.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "transformer": entry}))
    with pytest.raises(ValueError, match="names the transformer component as") as err:
        load_pipeline(tmp_path)
    assert "\n" not in str(err.value)


def test_a_module_a_file_names_is_never_imported(tmp_path):
    """Only the declared classes load: a model_index.json naming an importable module that is
    not the declared one is refused before anything of it runs."""
    import sys

    load_pipeline("video").save_pretrained(tmp_path)
    path = tmp_path / "model_index.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "classifier": ["antigravity", "VideoClassifier"]}))
    with pytest.raises(ValueError, match="never imports a class that a file names"):
        load_pipeline(tmp_path)
    assert "antigravity" not in sys.modules
