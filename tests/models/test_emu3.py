import pytest
import torch

from mmspec.decoding.generate import generate
from mmspec.core.sampling import SamplingConfig
from mmspec.models.adapters.emu3 import Emu3Condition, Emu3ImageGenerator
from tests.helpers.tiny_models import EMU3_GRID, emu3_inputs, tiny_emu3

PROMPTS = ["a cat", "red dog blue green"]  # different lengths: the first row is left-padded
NEGATIVES = ["bad ugly", "blurry bad"]  # equal lengths: transformers' unbatched CFG ignores padding


@pytest.fixture(scope="module")
def emu3():
    model, processor = tiny_emu3()
    enc, neg = emu3_inputs(processor, PROMPTS), emu3_inputs(processor, NEGATIVES)
    condition = Emu3Condition(enc.input_ids, enc.attention_mask, neg.input_ids, neg.attention_mask)
    return model, processor, condition, Emu3ImageGenerator(model, *EMU3_GRID)


def test_layout_forces_end_of_line_and_allows_visual_tokens(emu3):
    model, _, _, generator = emu3
    layout = generator.layout()
    H, W = EMU3_GRID
    assert layout.shape == (H, W + 1)
    eol = model.vocabulary_mapping.eol_token_id
    assert layout.forced.view(H, W + 1)[:, W].eq(eol).all() and layout.forced.view(H, W + 1)[:, :W].eq(-1).all()
    assert layout.allowed.nonzero().flatten().tolist() == model.vocabulary_mapping.image_tokens
    codebook = model.model.vqmodel.quantize.embedding.weight
    for code, token in model.vocabulary_mapping.img2bpe.items():
        torch.testing.assert_close(layout.token_embeddings[token], codebook[code].float())
    assert layout.token_embeddings[eol].eq(0).all()


def official_greedy(model, processor, condition, guidance_scale):
    """transformers' own greedy generation with Emu3's `prefix_allowed_tokens_fn`."""
    H, W = EMU3_GRID
    tok = processor.tokenizer
    visual = model.vocabulary_mapping.image_tokens
    tail = [tok.eof_token_id, tok.eoi_token_id, tok.eos_token_id]

    def allowed(batch_id, ids):
        offset = ids.shape[0] - int((ids == tok.image_wrapper_token_id).nonzero()[0, 0])
        if offset > H * (W + 1):
            return [tail[min(offset - H * (W + 1) - 1, 2)]]
        return [model.vocabulary_mapping.eol_token_id] if offset % (W + 1) == 0 else visual

    cfg = {}
    if guidance_scale != 1:
        cfg = dict(negative_prompt_ids=condition.negative_input_ids, negative_prompt_attention_mask=condition.negative_attention_mask)
    out = model.generate(
        input_ids=condition.input_ids, attention_mask=condition.attention_mask, max_new_tokens=H * (W + 1) + 3,
        do_sample=False, prefix_allowed_tokens_fn=allowed, guidance_scale=guidance_scale, **cfg,
    )
    generated = out[:, condition.input_ids.shape[1]:]
    assert generated[:, -3:].tolist() == [tail] * 2
    return generated[:, :-3]


@pytest.mark.parametrize("guidance_scale", [1.0, 3.0])
def test_ar_through_adapter_is_transformers_greedy_generation(emu3, guidance_scale):
    """transformers applies CFG to log-softmax scores; on the arg-max that equals CFG on
    logits, since each row's log-normaliser shifts all its scores alike."""
    model, processor, condition, generator = emu3
    expected = official_greedy(model, processor, condition, guidance_scale)
    tokens, _ = generate(generator, condition, decoding="ar", sampling=SamplingConfig(guidance_scale=guidance_scale, temperature=0))
    assert torch.equal(tokens, expected)
    assert len(set(tokens.flatten().tolist())) > 2  # not a degenerate constant image


def test_guidance_without_negative_prompt_is_an_error(emu3):
    _, _, condition, generator = emu3
    with pytest.raises(ValueError, match="negative_input_ids"):
        generator.start(Emu3Condition(condition.input_ids, condition.attention_mask), guided=True)
