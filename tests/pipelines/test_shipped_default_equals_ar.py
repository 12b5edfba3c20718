"""The default decoding of every shipped model returns AR's tokens for the same seed, at
one and two threads, batch 1 and 4 (a generator per item), sampled at the model's own
sampling (temperature 1 where it samples)."""

import pytest
import torch
from PIL import Image

from mmspec.pipelines import load_pipeline


def call(name, pipe, decoding, batch, seed):
    generator = [torch.Generator().manual_seed(seed + i) for i in range(batch)]
    if name == "default":
        return pipe(class_labels=[i % 10 for i in range(batch)], decoding=decoding, generator=generator).tokens
    if name == "video":
        return pipe(class_labels=[i % 4 for i in range(batch)], num_frames=4, decoding=decoding, generator=generator).tokens
    if name == "speech":
        return pipe(["seven", "one", "four", "nine"][:batch], decoding=decoding, generator=generator).tokens
    if name == "mesh":
        return pipe(class_labels=[i % 2 for i in range(batch)], decoding=decoding, generator=generator, max_faces=24).tokens
    image = Image.new("RGB", (64, 64), (200, 30, 30))
    return pipe([image] * batch, decoding=decoding, do_sample=True, generator=generator).tokens


@pytest.mark.slow
@pytest.mark.parametrize("name", ["default", "video", "speech", "mesh", "captioner"])
def test_default_decoding_gives_ar_tokens(name):
    pipe = load_pipeline(name)
    pipe.set_progress_bar_config(disable=True)
    threads = torch.get_num_threads()
    try:
        for num_threads, batch in ((1, 1), (2, 4)):
            torch.set_num_threads(num_threads)
            ar = call(name, pipe, "ar", batch, seed=10)
            assert torch.equal(call(name, pipe, "auto", batch, seed=10), ar), (num_threads, batch)
    finally:
        torch.set_num_threads(threads)
