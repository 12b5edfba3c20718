"""The shipped mesh model: it loads, its judge recognises the dataset, and it decodes."""

import torch

from mmspec.datasets.meshes import CLASS_NAMES, load_split
from mmspec.pipelines import load_pipeline
from mmspec.pipelines.mesh import MESH_ASSETS, MeshPipeline


def test_the_shipped_mesh_model_loads_with_its_classes_and_classifier():
    pipe = load_pipeline(MESH_ASSETS)
    assert isinstance(pipe, MeshPipeline) and pipe.class_names == list(CLASS_NAMES)
    assert pipe.classifier is not None and pipe.default_sampling["temperature"] == 0.5
    meshes, labels = load_split("heldout", 10 * len(CLASS_NAMES))
    predicted = pipe.classifier.classify(meshes, torch.Generator().manual_seed(0))
    assert (predicted == torch.tensor(labels)).float().mean() >= 0.9
    out = pipe(class_labels="box", max_faces=2, decoding="mc-sjd+lookup", generator=torch.Generator().manual_seed(0))
    assert out.tokens.shape == (1, 19) and out.stats[0].forward_passes <= 19
