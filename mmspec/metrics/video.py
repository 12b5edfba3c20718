"""Quality of generated videos: class accuracy (a small video classifier), temporal consistency
and the spread within a class.

`VideoClassifier` is the judge of the Moving Shapes videos: a CNN over the frames stacked
as channels (early fusion: the first convolution sees every frame at once, so it can tell
a shape that moves right from one that moves left). It is trained by
`scripts/train_video_model.py` on real videos and ships in `mmspec/assets/video/classifier/`.

Temporal consistency is measured two ways, reported beside the same numbers for real
videos: `frame_change`, the mean absolute pixel change between consecutive frames (in
[0, 1] units: flicker raises it, a frozen video has 0), and `token_repeat`, the share of
tokens equal to the token at the same (row, col) of the previous frame.

`class_spread` guards class accuracy against a sampler that buys it with sameness (low
temperature, strong guidance): the mean absolute pixel difference between two videos of one
class, beside the same number for real videos. A sampler that collapses to one video per
class scores 0.

Example:
    >>> import torch
    >>> from mmspec.metrics.video import VideoClassifier, VideoClassifierConfig, temporal_consistency
    >>> clf = VideoClassifier(VideoClassifierConfig(num_classes=8, frames=8)).eval()
    >>> clf.predict(torch.zeros(2, 8, 3, 32, 32)).shape
    torch.Size([2])
    >>> temporal_consistency(torch.zeros(2, 8, 3, 32, 32))["frame_change"]
    0.0
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from mmspec.utils.checkpoint import DeviceDtypeMixin, FromCheckpoint, JSONConfig
from mmspec.metrics.classifier import conv_stages


@dataclass
class VideoClassifierConfig(JSONConfig):
    """Class count, frames per video and the widths of the stages (each halves the resolution)."""

    config_name = "video classifier config"

    num_classes: int = 8
    frames: int = 8
    widths: list[int] = field(default_factory=lambda: [48, 96, 128])


class VideoClassifier(FromCheckpoint, DeviceDtypeMixin, nn.Module):
    """Frames stacked as channels, then stages of (3x3 conv, 3x3 stride-2 conv) with batch
    norm and SiLU, global average pooling and a linear head. Use it in eval mode."""

    checkpoint_name = "video classifier checkpoint"

    def __init__(self, config: VideoClassifierConfig):
        super().__init__()
        self.config = config
        self.body = conv_stages(3 * config.frames, config.widths)
        self.head = nn.Linear(config.widths[-1], config.num_classes)

    def forward(self, videos: torch.Tensor) -> torch.Tensor:
        """Class logits `[B, num_classes]` of `videos [B, F, 3, H, W]` in [-1, 1]."""
        F = self.config.frames
        if videos.dim() != 5 or videos.shape[1:3] != (F, 3):
            raise ValueError(f"videos must be [B, {F}, 3, H, W] in [-1, 1], got {tuple(videos.shape)}")
        x = videos.to(self.head.weight).flatten(1, 2)  # [B, 3F, H, W]
        return self.head(self.body(x).mean(dim=(2, 3)))

    @torch.no_grad()
    def predict(self, videos: torch.Tensor, batch_size: int = 256) -> torch.Tensor:
        """Predicted classes `[B]` (long)."""
        return torch.cat([self(chunk).argmax(-1) for chunk in videos.split(batch_size)])


def temporal_consistency(videos: torch.Tensor, tokens: torch.Tensor | None = None) -> dict[str, float]:
    """`frame_change` of `videos [N, F, 3, H, W]` in [-1, 1] and, given their `tokens
    [N, F, rows, cols]`, `token_repeat` (see the module docstring)."""
    if videos.dim() != 5 or videos.shape[1] < 2:
        raise ValueError(f"videos must be [N, F >= 2, 3, H, W], got {tuple(videos.shape)}")
    out = {"frame_change": float((videos[:, 1:] - videos[:, :-1]).abs().mean() / 2)}
    if tokens is not None:
        out["token_repeat"] = float((tokens[:, 1:] == tokens[:, :-1]).float().mean())
    return out


def class_report(pred: torch.Tensor, labels: torch.Tensor, names: list[str]) -> str:
    """`accuracy: class right/total (errors as the predicted classes); ...`, e.g.
    `0.400: a 1/2 (1 as b); b 1/3 (2 as a)`."""
    parts = []
    for c, name in enumerate(names):
        mine = labels == c
        wrong = pred[mine & (pred != c)]
        errors = ", ".join(f"{int((wrong == k).sum())} as {names[k]}" for k in wrong.unique().tolist())
        parts.append(f"{name} {int((pred[mine] == c).sum())}/{int(mine.sum())}" + (f" ({errors})" if errors else ""))
    return f"{float((pred == labels).float().mean()):.3f}: " + "; ".join(parts)


def class_spread(videos: torch.Tensor, labels: torch.Tensor) -> float:
    """Mean absolute pixel difference (in [0, 1] units) between two distinct videos of one
    class of `videos [N, F, 3, H, W]` in [-1, 1], averaged over the classes of `labels [N]`
    that have at least two videos."""
    spreads = []
    for c in labels.unique():
        mine = videos[labels == c].flatten(1)
        n = len(mine)
        if n >= 2:
            spreads.append(float(torch.cdist(mine, mine, p=1).sum() / (n * (n - 1) * mine.shape[1] * 2)))
    if not spreads:
        raise ValueError("class_spread needs two videos of one class")
    return sum(spreads) / len(spreads)


@torch.no_grad()
def evaluate_videos(videos: torch.Tensor, labels: torch.Tensor, classifier: VideoClassifier,
                    tokens: torch.Tensor | None = None) -> dict[str, float]:
    """`class_accuracy` of `videos [N, F, 3, H, W]` against the requested `labels [N]`, and
    their temporal consistency (`temporal_consistency`) and, where a class has two videos,
    `class_spread`."""
    if len(videos) != len(labels):
        raise ValueError(f"one label per video: got {len(labels)} labels for {len(videos)} videos")
    labels = labels.cpu()
    accuracy = float((classifier.predict(videos).cpu() == labels).float().mean())
    out = {"class_accuracy": accuracy, **temporal_consistency(videos, tokens)}
    if len(labels.unique()) < len(labels):
        out["class_spread"] = class_spread(videos.cpu(), labels)
    return out
