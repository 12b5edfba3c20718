import pytest
import torch

from mmspec.decoding.generate import generate
from mmspec.core.sampling import SamplingConfig
from mmspec.models.adapters.janus import JanusCondition, JanusImageGenerator
from tests.helpers.tiny_models import JANUS_GRID, janus_inputs, tiny_janus

PROMPTS = ["a cat", "red dog blue green"]  # different lengths: the first row is left-padded


@pytest.fixture(scope="module")
def janus():
    model, processor = tiny_janus()
    enc = janus_inputs(processor, PROMPTS)
    return model, processor, JanusCondition(enc.input_ids, enc.attention_mask), JanusImageGenerator(model)


def test_layout_is_the_code_grid_with_the_codebook(janus):
    model, _, _, generator = janus
    layout = generator.layout()
    assert layout.shape == JANUS_GRID and layout.vocab_size == 12
    assert layout.allowed is None and layout.forced is None
    torch.testing.assert_close(layout.token_embeddings, model.model.vqmodel.quantize.embedding.weight.detach())


def test_unconditional_rows_keep_only_bos_and_begin_of_image(janus):
    _, processor, condition, generator = janus
    tok = processor.tokenizer
    uncond = generator.unconditional_ids(condition.input_ids)
    assert uncond[1].tolist() == [tok.bos_token_id] + [tok.pad_token_id] * 4 + [tok.boi_token_id]


@pytest.mark.parametrize("guidance_scale", [1.5, 5.0])
def test_ar_through_adapter_is_transformers_greedy_generation(janus, guidance_scale):
    """Against `generate(..., generation_mode="image", do_sample=False)`. Equal-length
    prompts: transformers' image loop counts left padding in its position ids. Guidance 1
    is not compared: transformers' image loop then crashes (it doubles the batch for the
    CFG rows but adds no CFG processor to merge them)."""
    model, processor, _, generator = janus
    enc = janus_inputs(processor, ["a cat", "red dog"])
    expected = model.generate(input_ids=enc.input_ids, attention_mask=enc.attention_mask, generation_mode="image",
                              do_sample=False, guidance_scale=guidance_scale)
    condition = JanusCondition(enc.input_ids, enc.attention_mask)
    tokens, _ = generate(generator, condition, decoding="ar", sampling=SamplingConfig(guidance_scale=guidance_scale, temperature=0))
    assert torch.equal(tokens, expected)
    assert len(set(tokens.flatten().tolist())) > 2  # not a degenerate constant image


def test_padded_prompt_gives_the_same_image_as_alone(janus):
    """Padding is invisible: a prompt decodes to the same codes alone and left-padded."""
    _, processor, condition, generator = janus
    sampling = SamplingConfig(guidance_scale=3.0, temperature=0)
    batch, _ = generate(generator, condition, decoding="ar", sampling=sampling)
    alone = janus_inputs(processor, PROMPTS[:1])
    single, _ = generate(generator, JanusCondition(alone.input_ids, alone.attention_mask), decoding="ar", sampling=sampling)
    assert condition.attention_mask[0, 0] == 0 and torch.equal(batch[:1], single)
