import numpy as np
import pytest
import torch

from mmspec.datasets.shapes import CHUNK, IMAGE_SIZE, NUM_CLASSES, generate, load_split, render


def test_same_seed_gives_same_images_and_other_seeds_differ():
    a, la = generate(40, seed=7)
    b, lb = generate(40, seed=7)
    c, _ = generate(40, seed=8)
    assert torch.equal(a, b) and torch.equal(la, lb)
    assert not torch.equal(a, c)


def test_images_are_float_rgb_in_range_and_not_flat():
    images, labels = generate(50, seed=0)
    assert images.shape == (50, 3, IMAGE_SIZE, IMAGE_SIZE) and images.dtype == torch.float32
    assert labels.dtype == torch.long
    assert images.min() >= -1 and images.max() <= 1
    # every image varies: no flat picture of one colour
    assert (images.flatten(1).std(1) > 0.05).all()


def test_classes_are_balanced():
    _, labels = load_split("train", 200)
    assert torch.equal(torch.bincount(labels, minlength=NUM_CLASSES), torch.full((NUM_CLASSES,), 20))


def test_split_prefix_is_stable_across_chunks_and_splits_are_disjoint():
    start = CHUNK - 5  # straddles two seed chunks
    many, many_labels = load_split("heldout", 10, start=start)
    few, few_labels = load_split("heldout", 3, start=start + 4)
    assert torch.equal(many[4:7], few) and torch.equal(many_labels[4:7], few_labels)
    train, _ = load_split("train", 10)
    heldout, _ = load_split("heldout", 10)
    assert not any(torch.equal(t, h) for t in train for h in heldout)


def test_bad_input_is_a_value_error():
    with pytest.raises(ValueError, match="unknown split"):
        load_split("test", 10)
    with pytest.raises(ValueError, match="class indices"):
        render(np.array([NUM_CLASSES]), np.random.default_rng(0))
    with pytest.raises(ValueError, match="n must be"):
        generate(-1, seed=0)
