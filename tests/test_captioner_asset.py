"""The shipped captioner: it loads offline, its greedy captions name the right class and
colours, and lookup drafts give the same text as AR in fewer forwards."""

import pytest

from mmspec.datasets.shape_captions import caption_correct, load_scenes
from mmspec.images import to_pil
from mmspec.pipelines import load_pipeline
from mmspec.pipelines.captioning import CAPTIONER_ASSETS


@pytest.fixture(scope="module")
def pipe():
    return load_pipeline(CAPTIONER_ASSETS)


def test_greedy_captions_are_right_on_held_out_images(pipe):
    images, scenes = load_scenes("heldout", 10)
    texts = pipe(to_pil(images), decoding="mc-sjd+lookup").text
    assert sum(caption_correct(t, s) for t, s in zip(texts, scenes)) >= 9, texts


def test_lookup_drafts_match_ar_in_fewer_forwards(pipe):
    image = to_pil(load_scenes("heldout", 1)[0])
    ar = pipe(image, decoding="ar")
    fast = pipe(image, decoding="mc-sjd+lookup")
    assert fast.text == ar.text
    assert fast.stats.forward_passes * 2 <= ar.stats.forward_passes
