"""Quality of generated Shapes images: class accuracy and feature-FID.

Benchmarks call `evaluate_images` with the same requested labels for every decoding
method, so the numbers compare decoding methods on one model. The judge is the shipped
Shapes classifier (`mmspec.metrics.classifier`); the feature-FID is the FID formula on its
penultimate features (`mmspec.metrics.fid`), since Inception weights cannot be downloaded.

Example:
    >>> import torch
    >>> from mmspec.datasets.shapes import load_split
    >>> real, labels = load_split("heldout", 100)
    >>> other, other_labels = load_split("heldout", 100, start=100)
    >>> scores = evaluate_images(other, other_labels, real)  # doctest: +SKIP
"""

from __future__ import annotations

import torch

from mmspec.metrics.classifier import ShapesClassifier, classify
from mmspec.metrics.fid import frechet_distance


@torch.no_grad()
def evaluate_images(
    images: torch.Tensor,
    labels: torch.Tensor,
    real_images: torch.Tensor,
    classifier: ShapesClassifier | None = None,
) -> dict[str, float]:
    """Class accuracy of `images` against the requested `labels`, and their feature-FID
    against `real_images`.

    Args:
        images (`torch.Tensor`): generated `[N, 3, 64, 64]` in [-1, 1].
        labels (`torch.Tensor`): the class each image was generated for, `[N]`.
        real_images (`torch.Tensor`): held-out real images `[M, 3, 64, 64]` (use as many as
            `images`, with the same classes: FID is biased by sample size).
        classifier (`ShapesClassifier`, *optional*): the judge; the shipped one by default.

    Returns:
        `{"class_accuracy": float in [0, 1], "feature_fid": float >= 0}`.
    """
    if len(images) != len(labels):
        raise ValueError(f"one label per image: got {len(labels)} labels for {len(images)} images")
    if classifier is None:
        from mmspec.metrics.classifier import load_classifier

        classifier = load_classifier()
    preds, feats = classify(classifier, images)
    _, real_feats = classify(classifier, real_images)
    accuracy = (preds.cpu() == labels.cpu()).double().mean()
    return {"class_accuracy": float(accuracy), "feature_fid": frechet_distance(feats, real_feats)}
