import json

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import save_file

from mmspec.assets import DEFAULT_ASSETS

from mmspec.pipelines.llamagen import load_default
from mmspec.decoding.config import DecodingConfig
from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT
from mmspec.pipelines import load_pipeline
from mmspec.pipelines.llamagen import LlamaGenPipeline, left_pad_captions
from tests.helpers.pipelines import tiny_c2i_pipeline, tiny_vq


@pytest.fixture(scope="module")
def c2i_pipe():
    return tiny_c2i_pipeline()


@pytest.mark.parametrize("decoding", ["ar", "mc-sjd", "zipar+mc-sjd", "sjd+gsd"])
def test_c2i_call_returns_images_and_stats_per_image(c2i_pipe, decoding):
    decoding = DecodingConfig.from_name(decoding, zipar_window=2)  # the 4 x 4 grid refuses the default 8
    out = c2i_pipe(class_labels=[0, 2], num_images_per_prompt=2, decoding=decoding, generator=torch.Generator().manual_seed(0))
    assert len(out.images) == 4 and all(isinstance(im, Image.Image) and im.size == (8, 8) for im in out.images)
    assert len(out.stats) == 4 and all(s.tokens_committed == 16 for s in out.stats)
    assert out.tokens.shape == (4, 16)


def test_output_types(c2i_pipe):
    kw = dict(class_labels=1, generator=torch.Generator().manual_seed(0), decoding="ar")
    np_images = c2i_pipe(output_type="np", **kw).images
    pt_images = c2i_pipe(output_type="pt", **kw).images
    tokens = c2i_pipe(output_type="tokens", **kw).images
    assert np_images.shape == (1, 8, 8, 3) and np_images.dtype == np.float32 and 0 <= np_images.min() <= np_images.max() <= 1
    assert pt_images.shape == (1, 3, 8, 8)
    assert tokens.shape == (1, 16) and tokens.dtype == torch.long
    images, stats = c2i_pipe(return_dict=False, **kw)
    assert len(images) == len(stats) == 1


def test_callback_is_called_after_every_forward(c2i_pipe):
    calls = []
    out = c2i_pipe(class_labels=[0], decoding="mc-sjd", generator=torch.Generator().manual_seed(0),
                   callback_on_step_end=lambda pipe, step, committed, kw: calls.append((step, committed)) or {})
    assert len(calls) == out.stats[0].forward_passes
    assert calls[-1][1] == 16 and [s for s, _ in calls] == list(range(len(calls)))


def test_save_load_round_trip_gives_the_same_tokens(c2i_pipe, tmp_path):
    c2i_pipe.save_pretrained(tmp_path)
    loaded = LlamaGenPipeline.from_pretrained(tmp_path)
    kw = dict(class_labels=[1, 2], decoding="mc-sjd", output_type="tokens")
    a = c2i_pipe(generator=torch.Generator().manual_seed(3), **kw).images
    b = loaded(generator=torch.Generator().manual_seed(3), **kw).images
    assert torch.equal(a, b)
    assert loaded.class_names == ["a", "b", "c"]
    assert loaded.default_sampling == {"guidance_scale": 2.0, "temperature": 1.0, "top_k": 2000, "top_p": 1.0}


def test_call_does_not_change_the_components(c2i_pipe):
    before = {k: v.clone() for k, v in c2i_pipe.transformer.state_dict().items()}
    c2i_pipe(class_labels=[0], decoding="sjd", generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(v, c2i_pipe.transformer.state_dict()[k]) for k, v in before.items())


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(class_labels=[]), "class_labels is empty"),
        (dict(class_labels=[5]), r"class label 5 is out of range \[0, 3\)"),
        (dict(class_labels=[0], guidance_scale=-1.0), "guidance_scale must be >= 0"),
        (dict(class_labels=[0], decoding="turbo"), "unknown decoding 'turbo'"),
        (dict(class_labels=[0], output_type="jpeg"), "unknown output_type 'jpeg'"),
        (dict(prompt="a cat"), "class-conditional: pass class_labels, not prompt"),
        (dict(class_labels=[0], top_k=-3), "top_k must be an integer >= 0"),
        (dict(class_labels=[0], num_images_per_prompt=0), "num_images_per_prompt must be an integer >= 1"),
    ],
)
def test_bad_input_is_a_one_line_error(c2i_pipe, kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        c2i_pipe(**kwargs)
    assert "\n" not in str(info.value)


def test_loading_another_pipeline_class_is_a_clear_error(tmp_path):
    (tmp_path / "model_index.json").write_text('{"_class_name": "Emu3Pipeline"}')
    with pytest.raises(ValueError, match="holds a 'Emu3Pipeline' pipeline, not a LlamaGenPipeline"):
        LlamaGenPipeline.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="not a directory"):
        LlamaGenPipeline.from_pretrained(tmp_path / "nope")


def test_left_padding_moves_valid_caption_tokens_to_the_end():
    embeds = torch.arange(8.0).view(1, 4, 2)
    mask = torch.tensor([[1, 1, 0, 0]])
    padded, new_mask = left_pad_captions(embeds, mask)
    assert new_mask.tolist() == [[0, 0, 1, 1]]
    assert padded[0].tolist() == [[0, 0], [0, 0], [0, 1], [2, 3]]


def tiny_t5():
    """A 1-layer T5 encoder and a word-level tokenizer, built offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, T5Config, T5EncoderModel

    words = ["<pad>", "</s>", "<unk>", "a", "red", "cat", "blue", "dog"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
    torch.manual_seed(0)
    encoder = T5EncoderModel(T5Config(vocab_size=8, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)).eval()
    return encoder, tokenizer


def test_t2i_pipeline_generates_from_prompts_and_round_trips(tmp_path):
    encoder, tokenizer = tiny_t5()
    torch.manual_seed(0)
    gpt = LlamaGenGPT(LlamaGenConfig(dim=32, n_layer=1, n_head=2, vocab_size=32, block_size=16, model_type="t2i",
                                     caption_dim=16, cls_token_num=6)).eval()
    pipe = LlamaGenPipeline(gpt, tiny_vq(), encoder, tokenizer)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(prompt=["a red cat", "blue dog"], decoding="mc-sjd", guidance_scale=3.0, generator=torch.Generator().manual_seed(0))
    assert len(out.images) == 2
    pipe.save_pretrained(tmp_path)
    loaded = LlamaGenPipeline.from_pretrained(tmp_path)
    kw = dict(prompt="a red cat", decoding="sjd", output_type="tokens", guidance_scale=3.0)
    assert torch.equal(pipe(generator=torch.Generator().manual_seed(1), **kw).images,
                       loaded(generator=torch.Generator().manual_seed(1), **kw).images)
    with pytest.raises(ValueError, match="prompt must be a non-empty"):
        pipe(prompt=[])


def test_to_device_and_dtype_work_and_cast():
    """`pipe.to("cpu")` used to fail in diffusers (`'LlamaGenGPT' object has no attribute 'dtype'`)."""
    pipe = tiny_c2i_pipeline()
    assert pipe.to("cpu") is pipe and pipe.device == torch.device("cpu") and pipe.dtype == torch.float32
    pipe.to(torch.bfloat16)
    assert pipe.dtype == torch.bfloat16 and pipe.vqvae.dtype == torch.bfloat16
    out = pipe(class_labels=[1], decoding="ar", output_type="tokens", generator=torch.Generator().manual_seed(0))
    assert out.images.shape == (1, 16)


def test_from_pretrained_casts_to_torch_dtype_and_refuses_unknown_keywords(c2i_pipe, tmp_path):
    c2i_pipe.save_pretrained(tmp_path)
    loaded = LlamaGenPipeline.from_pretrained(tmp_path, torch_dtype=torch.bfloat16)
    assert loaded.dtype == torch.bfloat16 and loaded.transformer.output.weight.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="got unknown keyword.*use_safetensors; it takes torch_dtype") as info:
        LlamaGenPipeline.from_pretrained(tmp_path, use_safetensors=True)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="torch_dtype must be a floating torch.dtype"):
        LlamaGenPipeline.from_pretrained(tmp_path, torch_dtype="bf16")


def test_front_end_attributes(c2i_pipe):
    assert c2i_pipe.condition_kind == "class" and c2i_pipe.class_names == ["a", "b", "c"]
    assert c2i_pipe.token_grid == (4, 4) and c2i_pipe.sequence_length == 16
    assert c2i_pipe.default_sampling == {"guidance_scale": 2.0, "temperature": 1.0, "top_k": 2000, "top_p": 1.0}
    assert c2i_pipe.check_decoding("mc-sjd").window == 16
    assert c2i_pipe.max_images_per_call > 1000  # 1 layer, 32 dims: tiny caches


def test_unnamed_classes_are_numbered():
    pipe = tiny_c2i_pipeline()
    pipe._class_names = None
    assert pipe.class_names == ["0", "1", "2"]


@pytest.mark.parametrize(
    "decoding,message",
    [
        (DecodingConfig(window=17), "window 17 is longer than the 16-token sequence; choose 1 to 16"),
        (DecodingConfig.from_name("zipar+mc-sjd"), "zipar_window 8 is longer than a 4-token row; choose 1 to 4"),
    ],
)
def test_windows_longer_than_the_model_are_refused_before_work(c2i_pipe, decoding, message):
    """`--window 100000` used to run at 3.75 s per token."""
    calls = []
    with pytest.raises(ValueError, match=message):
        c2i_pipe(class_labels=[0], decoding=decoding, callback_on_step_end=lambda *a: calls.append(a))
    with pytest.raises(ValueError, match=message):
        c2i_pipe.check_decoding(decoding)
    assert calls == []


def test_more_images_than_the_model_allows_are_refused_before_work(c2i_pipe):
    """`--per-class 1000000` used to try to allocate 1.7 TB."""
    limit = c2i_pipe.max_images_per_call
    with pytest.raises(ValueError, match=f"{limit + 1} images in one call exceed this model's {limit}") as info:
        c2i_pipe(class_labels=[0], num_images_per_prompt=limit + 1)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(guidance_scale=float("inf")), "guidance_scale must be finite and at most 100"),
        (dict(guidance_scale=1e30), "guidance_scale must be finite and at most 100"),
        (dict(guidance_scale=float("nan")), "guidance_scale must be >= 0"),
        (dict(temperature=float("inf")), "temperature must be at most 10"),
        (dict(temperature=1e30), "temperature must be at most 10"),
        (dict(class_labels="3"), "unknown class name '3'"),
        (dict(class_labels=["3"]), "unknown class name '3'"),
        (dict(class_labels=True), "class_labels must be class names or integers"),
        (dict(class_labels=[True]), "class_labels must be class names or integers"),
        (dict(class_labels=1.7), "class_labels must be class names or integers"),
        (dict(class_labels=torch.tensor([True])), "class_labels must be integers"),
        (dict(generator=[torch.Generator()]), "generator is a list of 1 for 2 images"),
        (dict(generator="0"), "generator must be a torch.Generator or a list of one per image"),
    ],
)
def test_garbage_in_is_refused_before_work(c2i_pipe, kwargs, message):
    """inf / 1e30 guidance gave a flat image or noise with exit status 0; `True` and 1.7
    became class 1; "3" raised a traceback."""
    with pytest.raises(ValueError, match=message) as info:
        c2i_pipe(**{"class_labels": [0, 1], "decoding": "ar", **kwargs})
    assert "\n" not in str(info.value)


def test_numpy_and_tensor_integer_labels_are_classes(c2i_pipe):
    kw = dict(decoding="ar", output_type="tokens")
    a = c2i_pipe(class_labels=[np.int64(2)], generator=torch.Generator().manual_seed(0), **kw).images
    b = c2i_pipe(class_labels=torch.tensor([2]), generator=torch.Generator().manual_seed(0), **kw).images
    assert torch.equal(a, b)


def test_image_i_of_a_batch_with_a_generator_list_is_the_same_seed_alone(c2i_pipe):
    kw = dict(decoding="mc-sjd", output_type="tokens")
    batch = c2i_pipe(class_labels=[0, 2, 1], generator=[torch.Generator().manual_seed(s) for s in (5, 6, 7)], **kw)
    alone = c2i_pipe(class_labels=[2], generator=torch.Generator().manual_seed(6), **kw)
    assert torch.equal(batch.images[1], alone.images[0])
    assert len(batch.stats) == 3 and batch.stats[1].forward_passes == alone.stats[0].forward_passes


def test_one_generator_seeds_the_whole_batch_reproducibly(c2i_pipe):
    kw = dict(class_labels=[0, 2], decoding="mc-sjd", output_type="tokens")
    a = c2i_pipe(generator=torch.Generator().manual_seed(4), **kw).images
    b = c2i_pipe(generator=torch.Generator().manual_seed(4), **kw).images
    assert torch.equal(a, b)


def test_class_names_must_name_every_class():
    gpt = tiny_c2i_pipeline().transformer
    with pytest.raises(ValueError, match="class_names has 2 names for the model's 3 classes"):
        LlamaGenPipeline(gpt, tiny_vq(), class_names=["a", "b"])
    with pytest.raises(ValueError, match="class_names must be a list of non-empty strings"):
        LlamaGenPipeline(gpt, tiny_vq(), class_names="abc")


def test_saved_class_names_shorter_than_the_classes_are_a_one_line_error(c2i_pipe, tmp_path):
    c2i_pipe.save_pretrained(tmp_path)
    index = json.loads((tmp_path / "model_index.json").read_text())
    (tmp_path / "model_index.json").write_text(json.dumps({**index, "class_names": ["a"]}))
    with pytest.raises(ValueError, match="class_names has 1 names for the model's 3 classes") as info:
        LlamaGenPipeline.from_pretrained(tmp_path)
    assert "\n" not in str(info.value)


def test_model_index_that_is_a_json_list_is_a_one_line_error(tmp_path):
    (tmp_path / "model_index.json").write_text("[1, 2]")
    for load in (LlamaGenPipeline.from_pretrained, load_pipeline):
        with pytest.raises(ValueError, match=r"model_index\.json holds a JSON list, not an object") as info:
            load(tmp_path)
        assert "\n" not in str(info.value)


def test_damaged_weights_are_refused_at_load_naming_the_file(c2i_pipe, tmp_path):
    c2i_pipe.save_pretrained(tmp_path)
    weights = tmp_path / "transformer" / "model.safetensors"
    state = {k: torch.full_like(v, float("nan")) for k, v in c2i_pipe.transformer.state_dict().items()}
    save_file(state, str(weights))
    with pytest.raises(ValueError, match=r"transformer/model\.safetensors is corrupt") as info:
        LlamaGenPipeline.from_pretrained(tmp_path)
    assert "\n" not in str(info.value)
    weights.write_bytes(b"\x10\x00")
    with pytest.raises(ValueError, match=r"transformer/model\.safetensors is not a readable safetensors file") as info:
        LlamaGenPipeline.from_pretrained(tmp_path)
    assert "\n" not in str(info.value)


def test_saved_default_model_keeps_classifier_and_metadata(tmp_path):
    """`save_pretrained` of the shipped model used to drop `classifier/` and the training
    metadata that `load_default` reads."""
    pipe = LlamaGenPipeline.from_pretrained(DEFAULT_ASSETS)
    pipe.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "model_index.json").read_text())
    assert saved == json.loads((DEFAULT_ASSETS / "model_index.json").read_text())
    model = load_default(tmp_path)
    for a, b in zip(model.classifier.state_dict().values(), pipe.classifier.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert model.image_size == 64 and model.class_names == pipe.class_names
