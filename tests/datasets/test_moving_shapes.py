import numpy as np
import pytest
import torch

from mmspec.datasets.moving_shapes import CLASSES, NUM_CLASSES, NUM_FRAMES, load_split, render


def object_centre(video: torch.Tensor) -> torch.Tensor:
    """Centre `[F, 2]` (x, y) of the pixels that differ from the last frame's background
    estimate: the per-pixel median over frames is the static background."""
    background = video.median(dim=0).values
    moving = (video - background).abs().sum(1) > 0.3  # [F, H, W]
    ys, xs = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    weight = moving.float().sum((1, 2)).clamp(min=1)
    return torch.stack([(moving * xs).sum((1, 2)) / weight, (moving * ys).sum((1, 2)) / weight], -1)


def test_splits_are_deterministic_balanced_and_in_range():
    videos, labels = load_split("heldout", 2 * NUM_CLASSES)
    again, _ = load_split("heldout", 3, start=5)
    assert videos.shape == (2 * NUM_CLASSES, NUM_FRAMES, 3, 32, 32) and NUM_CLASSES >= 8 and NUM_FRAMES >= 8
    assert labels.tolist() == list(range(NUM_CLASSES)) * 2
    assert torch.equal(again, videos[5:8])
    assert -1 <= videos.min() and videos.max() <= 1
    assert not torch.equal(load_split("train", 1)[0], videos[:1])


@pytest.mark.parametrize("motion, axis, sign", [("right", 0, 1), ("left", 0, -1), ("down", 1, 1), ("up", 1, -1)])
def test_translating_classes_move_their_way(motion, axis, sign):
    label = next(i for i, (_, m) in enumerate(CLASSES) if m == motion)
    videos = torch.from_numpy(render(np.full(6, label), np.random.default_rng(0)))
    for video in videos:
        centre = object_centre(video)
        assert sign * (centre[-1, axis] - centre[0, axis]) > 3  # the centre of the changed pixels: part of the way


def test_the_background_is_static_and_growing_shapes_grow():
    label = next(i for i, (_, m) in enumerate(CLASSES) if m == "grow")
    videos = torch.from_numpy(render(np.full(4, label), np.random.default_rng(1)))
    corner = videos[:, :, :, :2, :2]
    assert torch.equal(corner, corner[:, :1].expand_as(corner))
    area = ((videos - videos[:, :1]).abs().sum(2) > 0.3).float().sum((2, 3))  # [N, F] pixels changed since frame 0
    assert (area[:, 1:] >= area[:, :-1]).all() and (area[:, -1] > 50).all()


def test_bad_labels_are_refused():
    with pytest.raises(ValueError, match="labels must be a 1-D array of class indices in"):
        render(np.array([NUM_CLASSES]), np.random.default_rng(0))
