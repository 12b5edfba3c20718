import pytest
import torch

from mmspec.metrics.video import VideoClassifier, VideoClassifierConfig, evaluate_videos, temporal_consistency


def test_temporal_consistency_of_a_frozen_and_of_a_flickering_video():
    frozen = torch.zeros(2, 4, 3, 8, 8)
    tokens = torch.zeros(2, 4, 2, 2, dtype=torch.long)
    assert temporal_consistency(frozen, tokens) == {"frame_change": 0.0, "token_repeat": 1.0}
    flicker = torch.ones(1, 4, 3, 8, 8)
    flicker[:, 1::2] = -1
    flicker_tokens = torch.arange(4).view(1, 4, 1, 1).expand(1, 4, 2, 2)
    assert temporal_consistency(flicker, flicker_tokens) == {"frame_change": 1.0, "token_repeat": 0.0}


def test_classifier_shapes_and_bad_input():
    clf = VideoClassifier(VideoClassifierConfig(num_classes=3, frames=4, widths=[8, 16])).eval()
    videos = torch.zeros(5, 4, 3, 16, 16)
    assert clf.predict(videos).shape == (5,)
    scores = evaluate_videos(videos, torch.zeros(5, dtype=torch.long), clf)
    assert set(scores) == {"class_accuracy", "frame_change"}
    with pytest.raises(ValueError, match=r"videos must be \[B, 4, 3, H, W\]"):
        clf(torch.zeros(1, 3, 3, 16, 16))
