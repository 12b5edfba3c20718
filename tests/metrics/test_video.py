import pytest
import torch

from mmspec.metrics.video import VideoClassifier, VideoClassifierConfig, class_report, class_spread, evaluate_videos, temporal_consistency


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
    assert set(scores) == {"class_accuracy", "frame_change", "class_spread"}
    with pytest.raises(ValueError, match=r"videos must be \[B, 4, 3, H, W\]"):
        clf(torch.zeros(1, 3, 3, 16, 16))


def test_class_spread_is_zero_for_copies_and_counts_pairs_within_a_class_only():
    black, white = -torch.ones(1, 2, 3, 4, 4), torch.ones(1, 2, 3, 4, 4)
    copies = torch.cat([black, black, white, white])
    assert class_spread(copies, torch.tensor([0, 0, 1, 1])) == 0.0
    # classes {black, white} and {black, white, black}: 1 and 2/3 of pairs differ fully
    videos = torch.cat([black, white, black, white, black])
    assert class_spread(videos, torch.tensor([0, 0, 1, 1, 1])) == pytest.approx((1 + 2 / 3) / 2)
    # a class with one video says nothing about spread
    assert class_spread(torch.cat([black, white, white]), torch.tensor([0, 1, 1])) == 0.0
    with pytest.raises(ValueError, match="two videos of one class"):
        class_spread(torch.cat([black, white]), torch.tensor([0, 1]))


def test_class_report_counts_hits_and_names_errors():
    labels, pred = torch.tensor([0, 0, 1, 1, 1]), torch.tensor([0, 1, 1, 0, 0])
    assert class_report(pred, labels, ["a", "b"]) == "0.400: a 1/2 (1 as b); b 1/3 (2 as a)"
