"""Shape scenes: the same pixels as `shapes.render`, attributes that agree with the pixels,
captions of 30-60 tokens, and a correctness check that can fail."""

import numpy as np
import pytest

from mmspec.datasets import shapes
from mmspec.datasets.shape_captions import (
    COLOUR_NAMES,
    Scene,
    caption,
    caption_checks,
    caption_correct,
    load_scenes,
    nearest_colour,
    render_scenes,
)
from mmspec.datasets.shapes import CLASS_NAMES, PALETTE


@pytest.fixture(scope="module")
def drawn():
    labels = np.arange(100) % 10
    images, scenes = render_scenes(labels, np.random.default_rng(7))
    return labels, images, scenes


def test_images_are_the_shapes_datasets_own(drawn):
    labels, images, _ = drawn
    assert np.array_equal(images, shapes.render(labels, np.random.default_rng(7)))


def test_object_and_background_colours_agree_with_the_pixels(drawn):
    """The pixel at the centre of a circle or square is its object colour; the median of an
    object-class image's border (the background, a gentle gradient) is nearest to its
    background colour in at least 9 images of 10."""
    _, images, scenes = drawn
    cell = {"top": 24, "middle": 32, "bottom": 40, "left": 24, "centre": 32, "right": 40}
    agree = []
    for image, scene in zip(images, scenes):
        pixels = (image + 1) / 2  # [3, H, W] in [0, 1]
        if scene.class_name in ("circle", "square"):
            row, col = (cell[w] for w in scene.position.split())
            assert COLOUR_NAMES[nearest_colour(pixels[:, row, col][None])[0]] == scene.object_colour
        if scene.class_name in CLASS_NAMES[:6]:
            border = np.concatenate([pixels[:, :2].reshape(3, -1), pixels[:, -2:].reshape(3, -1)], axis=1)
            agree.append(COLOUR_NAMES[nearest_colour(np.median(border, axis=1)[None])[0]] == scene.background_colour)
    assert np.mean(agree) >= 0.9


def test_two_tone_colours_are_the_patterns_own(drawn):
    """Stripes and checkerboards paint only their two colours (times a shade in [0.7, 1.1]):
    most pixels lie near the line through black and one of them."""
    _, images, scenes = drawn
    for image, scene in zip(images, scenes):
        if scene.class_name not in ("stripes", "checkerboard"):
            continue
        tones = PALETTE[[COLOUR_NAMES.index(scene.object_colour), COLOUR_NAMES.index(scene.background_colour)]]
        pixels = ((image + 1) / 2).reshape(3, -1).T  # [HW, 3]
        # distance of each pixel from the ray through each tone
        units = tones / np.linalg.norm(tones, axis=1, keepdims=True)
        along = pixels @ units.T
        off = np.linalg.norm(pixels[:, None] - along[:, :, None] * units[None], axis=-1).min(axis=1)
        assert np.median(off) < 0.1  # edges between the tones blend them


def test_captions_are_30_to_60_tokens_and_check_correct(drawn):
    _, _, scenes = drawn
    rng = np.random.default_rng(0)
    for scene in scenes:
        text = caption(scene, rng)
        assert 30 <= len(text.split()) <= 60
        assert caption_correct(text, scene), text


def test_a_wrong_colour_or_class_fails_the_check():
    scene = Scene(0, "red", "blue", "small", "top left", "waves")
    assert caption_correct("a small red circle on a blue background .", scene)
    assert caption_checks("a small green circle on a blue background .", scene) == {
        "class": True, "object_colour": False, "background_colour": True}
    assert not caption_correct("a small red ring on a blue background .", scene)
    assert not caption_correct("a small red circle on a grey background .", scene)
    assert not caption_correct("a small blue circle on a red background .", scene)  # swapped: an object has a side


def test_two_tone_patterns_accept_their_tones_in_either_order():
    stripes = Scene(CLASS_NAMES.index("stripes"), "red", "blue", "large", "everywhere", "vertical")
    assert caption_correct("vertical red stripes on a blue background .", stripes)
    assert caption_correct("vertical blue stripes on a red background .", stripes)
    assert not caption_correct("vertical blue stripes on a blue background .", stripes)
    assert not caption_correct("vertical red stripes on a green background .", stripes)


def test_splits_are_prefix_stable_and_classes_balanced():
    images, scenes = load_scenes("heldout", 12)
    more, more_scenes = load_scenes("heldout", 5, start=10)
    assert np.array_equal(images[10:].numpy(), more[:2].numpy()) and scenes[10:] == more_scenes[:2]
    assert [s.class_name for s in scenes[:10]] == list(CLASS_NAMES)
    with pytest.raises(ValueError, match="unknown split 'test'"):
        load_scenes("test", 1)
