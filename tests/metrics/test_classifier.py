import pytest
import torch

from mmspec.metrics.classifier import load_classifier
from mmspec.datasets.shapes import load_split
from mmspec.metrics.classifier import classify
from mmspec.metrics.quality import evaluate_images

pytestmark = pytest.mark.slow  # the shipped classifier over rendered images: 3 to 4 s a test


def test_shipped_classifier_is_accurate_on_heldout_images():
    images, labels = load_split("heldout", 200)
    preds, feats = classify(load_classifier(), images)
    assert feats.shape == (200, 128)
    assert (preds == labels).double().mean() >= 0.9


def test_evaluate_images_scores_real_images_as_real():
    real, _ = load_split("heldout", 200)
    images, labels = load_split("heldout", 200, start=200)
    same = evaluate_images(images, labels, real)
    shuffled = evaluate_images(images, labels.roll(1), real)
    noise = evaluate_images(torch.rand(200, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1, labels, real)
    assert same["class_accuracy"] >= 0.9 and shuffled["class_accuracy"] <= 0.1
    assert noise["feature_fid"] > 10 * same["feature_fid"]
