import numpy as np
import pytest
import torch
from PIL import Image

from mmspec.decoding.config import DecodingConfig
from mmspec.models.llamagen import LlamaGenConfig, LlamaGenGPT
from mmspec.pipelines.llamagen import LlamaGenPipeline, left_pad_captions
from mmspec.tokenizers.llamagen_vq import LlamaGenVQ, VQConfig


def tiny_vq(codebook_size=32):
    return LlamaGenVQ(VQConfig(codebook_size=codebook_size, codebook_embed_dim=4, encoder_ch_mult=[1, 1], decoder_ch_mult=[1, 1],
                               z_channels=32, base_channels=32, num_res_blocks=1)).eval()


def tiny_c2i_pipeline(block_size=16, n_layer=1, class_names=("a", "b", "c")) -> LlamaGenPipeline:
    """A 3-class LlamaGen pipeline with non-uniform conditionals and CFG 2 by default."""
    torch.manual_seed(0)
    gpt = LlamaGenGPT(LlamaGenConfig(dim=32, n_layer=n_layer, n_head=2, vocab_size=32, block_size=block_size, num_classes=3)).eval()
    torch.nn.init.normal_(gpt.output.weight, std=0.3)
    pipe = LlamaGenPipeline(gpt, tiny_vq(), class_names=list(class_names), default_sampling={"guidance_scale": 2.0})
    pipe.set_progress_bar_config(disable=True)
    return pipe


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
