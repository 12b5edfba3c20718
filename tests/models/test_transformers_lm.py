"""Unmodified transformers models under mmspec: greedy output equals `model.generate`'s for
every family, on tiny random configs, a batch of 3 left-padded prompts of different
lengths with an EOS inside the draft window."""

import pytest
import torch
import transformers as tf

from mmspec.models.adapters.transformers_lm import TransformersLM
from mmspec.pipelines.text import generate_text

V = 96
TEXT = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=64)
IMAGE, VISION_START, VISION_END, VIDEO = V - 1, V - 2, V - 3, V - 4
DECODINGS = ["ar", "sjd", "mc-sjd", "mc-sjd+lookup", "prompt-lookup"]


def tiny_text_model(family: str):
    torch.manual_seed(0)
    if family == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**TEXT))
    elif family == "qwen2":
        model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**TEXT))
    elif family == "mistral":
        model = tf.MistralForCausalLM(tf.MistralConfig(**TEXT))
    elif family == "opt":
        model = tf.OPTForCausalLM(tf.OPTConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                               ffn_dim=64, word_embed_proj_dim=32, max_position_embeddings=64, pad_token_id=1))
    else:
        model = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                                 bos_token_id=0, eos_token_id=0))
    return model.double().eval()  # float64: no near-tie flips between batched and one-token forwards


def left_padded(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    P = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), P, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, P - len(row):], mask[i, P - len(row):] = row, 1
    return ids, mask


def text_prompts(lengths=(3, 7, 5)):
    g = torch.Generator().manual_seed(1)
    return left_padded([torch.randint(4, V - 8, (n,), generator=g) for n in lengths])


def eos_inside_the_window(model, ids, mask, **inputs) -> int:
    """A token greedy decoding writes at step 4 of the first prompt: with it as EOS, the
    first sequence stops inside the first draft window while the others go on."""
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0,
                         eos_token_id=None, **inputs)
    return int(out[0, ids.shape[1] + 4])


def assert_greedy_matches(model, ids, mask, decoding, **inputs):
    eos = eos_inside_the_window(model, ids, mask, **inputs)
    ref = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0,
                         eos_token_id=eos, **inputs)
    out, stats = generate_text(model, ids, mask, decoding=decoding, max_new_tokens=12, do_sample=False, pad_token_id=0,
                               eos_token_id=eos, return_stats=True, **inputs)
    assert int(stats.lengths.min()) < 12  # the EOS ended a sequence early
    assert torch.equal(out, ref)


@pytest.mark.parametrize("decoding", DECODINGS)
@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral", "opt", "gpt2"])
def test_greedy_matches_transformers_generate(family, decoding):
    model = tiny_text_model(family)
    ids, mask = text_prompts()
    assert_greedy_matches(model, ids, mask, decoding)


def tiny_llava():
    torch.manual_seed(0)
    vision = tf.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                 image_size=16, patch_size=4)
    config = tf.LlavaConfig(vision_config=vision, text_config=tf.LlamaConfig(**TEXT), image_token_index=IMAGE)
    return tf.LlavaForConditionalGeneration(config).double().eval()


def vlm_prompts(image_tokens: list[int], lengths=(3, 6, 4)):
    """Prompts of a word, the image tokens, then words; left-padded."""
    g = torch.Generator().manual_seed(2)
    rows = [torch.cat([torch.randint(4, V - 8, (1,), generator=g), torch.tensor(image_tokens),
                       torch.randint(4, V - 8, (n - 1,), generator=g)]) for n in lengths]
    return left_padded(rows)


@pytest.mark.parametrize("decoding", ["ar", "mc-sjd+lookup"])
def test_llava_greedy_matches_generate(decoding):
    model = tiny_llava()
    ids, mask = vlm_prompts([IMAGE] * 16)  # 16 patches of 4x4 pixels, CLS dropped
    pixels = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert_greedy_matches(model, ids, mask, decoding, pixel_values=pixels)


def tiny_qwen2_vl():
    torch.manual_seed(0)
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]}  # head_dim 8
    config = tf.Qwen2VLConfig(
        text_config=dict(TEXT, rope_parameters=rope, bos_token_id=None, eos_token_id=None),
        vision_config=dict(depth=1, embed_dim=32, hidden_size=32, num_heads=4, patch_size=2, spatial_merge_size=2,
                           temporal_patch_size=2, in_channels=3, mlp_ratio=2),
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VISION_START, vision_end_token_id=VISION_END,
    )
    return tf.Qwen2VLForConditionalGeneration(config).double().eval()


@pytest.mark.parametrize("decoding", ["ar", "mc-sjd+lookup"])
def test_qwen2_vl_greedy_matches_generate_with_multimodal_positions(decoding):
    """An 8x8 image in 2x2 patches merged 2x2: 4 image tokens whose rotary positions run
    over (time, height, width); the text after them continues from the largest."""
    model = tiny_qwen2_vl()
    ids, mask = vlm_prompts([VISION_START] + [IMAGE] * 4 + [VISION_END])
    inputs = dict(
        pixel_values=torch.randn(3 * 16, 3 * 2 * 2 * 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64),
        image_grid_thw=torch.tensor([[1, 4, 4]] * 3),
        mm_token_type_ids=(ids == IMAGE).long(),
    )
    assert_greedy_matches(model, ids, mask, decoding, **inputs)


def test_unsupported_family_and_attention_kernel_are_refused():
    neox = tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                                  intermediate_size=64))
    with pytest.raises(ValueError, match="families llama, qwen2, mistral, opt, gpt2, llava, qwen2_vl; got 'gpt_neox'"):
        TransformersLM(neox)
    model = tiny_text_model("llama")
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="attention implementation 'flash_attention_2'"):
        TransformersLM(model)


def test_sliding_window_longer_than_the_call_is_served_and_shorter_is_refused():
    torch.manual_seed(0)
    model = tf.MistralForCausalLM(tf.MistralConfig(**dict(TEXT, sliding_window=12))).double().eval()
    ids, mask = text_prompts((3, 4, 2))
    out = generate_text(model, ids, mask, decoding="mc-sjd", max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(out, model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                                           pad_token_id=0))
    with pytest.raises(ValueError, match="sliding window of 12 tokens"):
        generate_text(model, ids, mask, max_new_tokens=9)


def test_right_padding_is_refused():
    model = tiny_text_model("llama")
    ids, mask = text_prompts()
    with pytest.raises(ValueError, match="pad prompts on the left"):
        generate_text(model, ids.flip(1), mask.flip(1), max_new_tokens=4)
