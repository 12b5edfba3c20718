"""CaptioningPipeline: the same text as transformers' greedy `generate` for every text
decoding, a batch of images with prompts of different lengths (left padding), saving and
loading, and one-line errors for bad calls."""

import pytest
import torch

from mmspec.datasets.shape_captions import load_scenes
from mmspec.io.images import to_pil
from mmspec.pipelines import load_pipeline
from mmspec.pipelines.captioning import TEXT_DECODINGS, CaptioningPipeline
from tests.helpers.tiny_captioner import tiny_captioner


@pytest.fixture(scope="module")
def pipe():
    return tiny_captioner()


@pytest.fixture(scope="module")
def images():
    return to_pil(load_scenes("heldout", 3)[0])


PROMPTS = ["describe the picture .", "what colour is it ?", "describe the picture and its colours in a few words ."]


def transformers_greedy(pipe, images, prompts, max_new_tokens):
    inputs = pipe.encode(images, prompts)
    out = pipe.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                              pad_token_id=pipe.processor.tokenizer.pad_token_id)
    return out[:, inputs["input_ids"].shape[1]:]


@pytest.mark.parametrize("decoding", TEXT_DECODINGS)
def test_greedy_captions_match_transformers_generate(pipe, images, decoding):
    expected = transformers_greedy(pipe, images, PROMPTS, 20)
    out = pipe(images, prompt=PROMPTS, decoding=decoding, max_new_tokens=20)
    assert torch.equal(out.tokens[:, : expected.shape[1]], expected)
    assert out.text == [t.strip() for t in pipe.processor.tokenizer.batch_decode(expected, skip_special_tokens=True)]


def test_saved_pipeline_loads_back_with_the_same_captions(images, tmp_path):
    pipe = CaptioningPipeline(tiny_captioner().model, tiny_captioner().processor, default_prompt="say what you see .",
                              draft_texts=["a red circle on a blue background ."])
    pipe.save_pretrained(tmp_path)
    loaded = load_pipeline(tmp_path)
    assert isinstance(loaded, CaptioningPipeline) and loaded.default_prompt == "say what you see ."
    assert loaded.draft_texts == ["a red circle on a blue background ."]
    assert loaded.resolve_decoding("prompt-lookup").drafter.reference  # the texts, as token ids
    auto = loaded.resolve_decoding("auto")  # redrafts with phrase-lookup in them
    assert auto.method == "auto" and auto.redraft and auto.drafter.reference == loaded.draft_reference
    assert loaded(images, decoding="auto", max_new_tokens=8).text == pipe(images, decoding="ar", max_new_tokens=8).text
    assert loaded(images, decoding="ar", max_new_tokens=8).text == pipe(images, decoding="ar", max_new_tokens=8).text
    assert loaded(images, max_new_tokens=8).text == pipe(images, decoding="ar", max_new_tokens=8).text
    assert pipe(images, max_new_tokens=8).text == pipe(images, prompt="say what you see .", max_new_tokens=8).text


def test_images_of_another_size_are_resized(pipe, images):
    big = images[0].resize((128, 96))
    assert pipe.encode([big], ["describe the picture ."])["pixel_values"].shape == (1, 3, 64, 64)


@pytest.mark.parametrize("kwargs, message", [
    (dict(images=[]), "non-empty list of PIL images"),
    (dict(prompt=["a", "b"]), "2 prompts for 3 images"),
    (dict(prompt=""), "non-empty string"),
    (dict(max_new_tokens=0), "max_new_tokens must be an integer from 1"),
    (dict(decoding="zipar+mc-sjd"), r"unknown decoding 'zipar\+mc-sjd' for text"),
    (dict(do_sample=True, temperature=0.0), "temperature must be in"),
    (dict(do_sample=True, top_p=1.5), "top_p must be in"),
    (dict(prompt="describe " * 100), "more than the model's 256 positions"),
])
def test_bad_calls_are_refused_in_one_line(pipe, images, kwargs, message):
    call = {"images": images, **kwargs}
    with pytest.raises(ValueError, match=message) as err:
        pipe(**call)
    assert "\n" not in str(err.value)


def test_stats_are_one_per_caption(pipe, images):
    out = pipe(images, prompt=PROMPTS, decoding="mc-sjd+lookup", max_new_tokens=12)
    assert isinstance(out.stats, list) and len(out.stats) == len(images) == len(out.text)
    assert all(s.batch_size == 1 and s.commit_iteration.shape == (1, 12) for s in out.stats)
    tokens = out.tokens.tolist()
    eos = pipe.processor.tokenizer.eos_token_id
    assert [int(s.lengths) for s in out.stats] == [row.index(eos) + 1 if eos in row else 12 for row in tokens]
    text, stats = pipe(images, prompt=PROMPTS, decoding="mc-sjd+lookup", max_new_tokens=12, return_dict=False)
    assert text == out.text and [s.forward_passes for s in stats] == [s.forward_passes for s in out.stats]


@pytest.mark.parametrize("decoding", ["ar", "mc-sjd+lookup", "prompt-lookup"])
def test_callback_is_called_after_every_forward(pipe, images, decoding):
    calls = []
    callback = lambda pipe, step, committed, kw: calls.append((step, committed))  # noqa: E731
    out = pipe(images, decoding=decoding, max_new_tokens=10, callback_on_step_end=callback)
    assert len(calls) == max(s.forward_passes for s in out.stats)  # the batch runs until its longest caption is done
    assert [s for s, _ in calls] == list(range(len(calls))) and calls[-1][1] == 10
    calls.clear()  # a generator per image: still one batch, a key per image
    out = pipe(images, decoding=decoding, max_new_tokens=10, do_sample=True, callback_on_step_end=callback,
               generator=[torch.Generator().manual_seed(i) for i in range(len(images))])
    assert len(calls) == max(s.forward_passes for s in out.stats) and [s for s, _ in calls] == list(range(len(calls)))
