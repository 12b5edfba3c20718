"""A small CNN classifier of the Shapes dataset: the judge of generated images.

It gives class predictions (for class accuracy against the requested labels) and its
penultimate features (the global-average-pooled last convolution, `feature_dim` values),
on which `mmspec.metrics.fid` computes the feature-FID. Inception FID needs Inception
weights, which cannot be downloaded here; this classifier is trained by
`scripts/train_default_model.py` and ships in `mmspec/assets/default/classifier/`.

Example:
    >>> import torch
    >>> from mmspec.metrics.classifier import ClassifierConfig, ShapesClassifier
    >>> clf = ShapesClassifier(ClassifierConfig(num_classes=10)).eval()
    >>> clf.features(torch.zeros(2, 3, 64, 64)).shape, clf.predict(torch.zeros(2, 3, 64, 64)).shape
    (torch.Size([2, 128]), torch.Size([2]))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from mmspec.assets import DEFAULT_ASSETS
from mmspec.utils.checkpoint import DeviceDtypeMixin, FromCheckpoint, JSONConfig
from mmspec.utils.json_files import read_json


@dataclass
class ClassifierConfig(JSONConfig):
    """Widths of the four stages (each halves the resolution) and the class count."""

    config_name = "classifier config"

    num_classes: int = 10
    widths: list[int] = field(default_factory=lambda: [32, 64, 128, 128])


def conv_bn(cin: int, cout: int, stride: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout), nn.SiLU()]


def conv_stages(cin: int, widths: list[int]) -> nn.Sequential:
    """One stage per width: a 3x3 conv, then a 3x3 stride-2 conv (halving the resolution),
    each with batch norm and SiLU. The judges' common body."""
    layers = []
    for w in widths:
        layers += conv_bn(cin, w, 1) + conv_bn(w, w, 2)
        cin = w
    return nn.Sequential(*layers)


class ShapesClassifier(FromCheckpoint, DeviceDtypeMixin, nn.Module):
    """Stages of (3x3 conv, 3x3 stride-2 conv), each with batch norm and SiLU, then global
    average pooling (the features) and a linear head. Use it in eval mode (`from_checkpoint`
    returns it so): batch norm then uses its running statistics."""

    checkpoint_name = "Shapes classifier checkpoint"

    def __init__(self, config: ClassifierConfig):
        super().__init__()
        self.config = config
        self.body = conv_stages(3, config.widths)
        self.head = nn.Linear(config.widths[-1], config.num_classes)

    @property
    def feature_dim(self) -> int:
        return self.config.widths[-1]

    def _check(self, images: torch.Tensor) -> torch.Tensor:
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be [B, 3, H, W] in [-1, 1], got {tuple(images.shape)}")
        return images.to(self.head.weight)

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """Penultimate features `[B, feature_dim]` of images `[B, 3, H, W]` in [-1, 1]."""
        return self.body(self._check(images)).mean(dim=(2, 3))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Class logits `[B, num_classes]`."""
        return self.head(self.features(images))

    @torch.no_grad()
    def predict(self, images: torch.Tensor) -> torch.Tensor:
        """Predicted classes `[B]` (long)."""
        return self(images).argmax(-1)


@torch.no_grad()
def classify(classifier: ShapesClassifier, images: torch.Tensor, batch_size: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted classes `[N]` and penultimate features `[N, feature_dim]` of `images`,
    in batches of `batch_size`."""
    preds, feats = [], []
    for chunk in images.split(batch_size):
        f = classifier.features(chunk)
        feats.append(f)
        preds.append(classifier.head(f).argmax(-1))
    return torch.cat(preds), torch.cat(feats)


def random_blur(images: torch.Tensor, max_sigma: float, generator: torch.Generator) -> torch.Tensor:
    """Gaussian-blurs each image of `[B, 3, H, W]` with its own sigma in [0, max_sigma]
    (a training augmentation: the judge must not hinge on pixel-exact edges)."""
    B, C, H, W = images.shape
    sigma = torch.rand(B, generator=generator) * max_sigma + 1e-3
    r = torch.arange(-3, 4, dtype=torch.float32)
    k1 = torch.exp(-(r[None] ** 2) / (2 * sigma[:, None] ** 2))
    k1 = k1 / k1.sum(1, keepdim=True)  # [B, 7]
    k2 = (k1[:, :, None] * k1[:, None, :]).repeat_interleave(C, 0)[:, None]  # [B*C, 1, 7, 7]
    x = F.pad(images.reshape(1, B * C, H, W), (3, 3, 3, 3), mode="reflect")
    return F.conv2d(x, k2, groups=B * C).view(B, C, H, W)


def load_classifier(root: str | Path = DEFAULT_ASSETS, device: str | torch.device = "cpu") -> ShapesClassifier:
    """The shipped Shapes classifier alone."""
    folder = Path(root) / "classifier"
    config = ClassifierConfig.from_dict(read_json(folder / "config.json", "Shapes classifier"))
    return ShapesClassifier.from_checkpoint(folder / "model.safetensors", config).to(device)
