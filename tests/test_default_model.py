"""The embedded default model: loads through the LlamaGen loader and generates."""

import json
from pathlib import Path

import pytest
import torch

import mmspec
from mmspec.assets import DEFAULT_ASSETS
from mmspec.pipelines.llamagen import load_default
from mmspec.datasets.shapes import CLASS_NAMES
from mmspec.decoding.generate import generate
from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT
from mmspec.pipelines.llamagen import LlamaGenPipeline
from mmspec.tokenizers.llamagen_vq import LlamaGenVQ, VQConfig


@pytest.fixture(scope="module")
def model():
    return load_default()


def test_assets_are_small_safetensors_with_configs():
    files = sorted(p.relative_to(DEFAULT_ASSETS).as_posix() for p in DEFAULT_ASSETS.rglob("*") if p.is_file())
    assert files == [
        "classifier/config.json", "classifier/model.safetensors", "drafter/config.json", "drafter/model.safetensors",
        "model_index.json", "transformer/config.json", "transformer/model.safetensors", "vqvae/config.json",
        "vqvae/model.safetensors",
    ]
    assert sum((DEFAULT_ASSETS / f).stat().st_size for f in files) <= 40 * 2**20


def test_gpt_and_vq_load_through_the_llamagen_loader(model):
    gpt_config = json.loads((DEFAULT_ASSETS / "transformer" / "config.json").read_text())
    gpt = LlamaGenGPT.from_checkpoint(DEFAULT_ASSETS / "transformer" / "model.safetensors", LlamaGenConfig.from_dict(gpt_config))
    vq_config = json.loads((DEFAULT_ASSETS / "vqvae" / "config.json").read_text())
    vq = LlamaGenVQ.from_checkpoint(DEFAULT_ASSETS / "vqvae" / "model.safetensors", VQConfig.from_dict(vq_config))
    for ours, theirs in ((gpt, model.gpt), (vq, model.vq)):
        for (k, a), (_, b) in zip(ours.state_dict().items(), theirs.state_dict().items(), strict=True):
            assert torch.equal(a, b), k
    assert gpt.config.model_type == "c2i" and gpt.config.num_classes == len(CLASS_NAMES) == len(model.class_names)
    assert gpt.config.vocab_size == vq.config.codebook_size and gpt.config.block_size == 256


def test_generates_images_of_the_right_shape(model):
    tokens, stats = generate(model.gpt, torch.tensor([0, 9]), decoding="ar", sampling=model.sampling, generator=torch.Generator().manual_seed(0))
    assert tokens.shape == (2, 256) and stats.forward_passes == 256
    images = model.vq.decode(tokens)
    assert images.shape == (2, 3, 64, 64) and images.isfinite().all()
    assert model.vq.encode(images).shape == (2, 256)


def test_assets_are_package_data():
    """A non-editable install copies only the package: the model must live inside it."""
    assert DEFAULT_ASSETS.is_relative_to(Path(mmspec.__file__).parent)


def test_a_folder_without_the_classifier_is_not_the_default_model(tmp_path):
    pipe = LlamaGenPipeline.from_pretrained(DEFAULT_ASSETS)
    LlamaGenPipeline(pipe.transformer, pipe.vqvae, class_names=pipe.class_names).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="without the classifier and image size of the default model"):
        load_default(tmp_path)


def test_image_i_of_a_generator_list_has_the_pixels_of_its_seed_alone():
    """The docs promise equal images, not only equal tokens: a batched VQ decode rounded
    3 pixels of the same tokens 1/255 away from the same codes decoded alone."""
    import numpy as np

    from mmspec.pipelines import load_pipeline

    pipe = load_pipeline("default")
    pipe.set_progress_bar_config(disable=True)
    kw = dict(decoding="ar", output_type="np")
    batch = pipe(class_labels=[0, 1, 2], generator=[torch.Generator().manual_seed(s) for s in (0, 1, 2)], **kw).images
    for i in range(3):
        alone = pipe(class_labels=[i], generator=torch.Generator().manual_seed(i), **kw).images[0]
        assert np.array_equal(batch[i], alone), i
