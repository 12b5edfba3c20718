"""The ceiling benchmark's per-class summary counts each class's hits and names its errors."""

import torch

from tests.training_scripts import load_script


def test_per_class_counts_hits_and_names_errors():
    module = load_script("video_ceiling", folder="benchmarks")
    labels, pred = torch.tensor([0, 0, 1, 1, 1]), torch.tensor([0, 1, 1, 0, 0])
    assert module.per_class(pred, labels, ["a", "b"]) == "0.400: a 1/2 (1 as b); b 1/3 (2 as a)"
