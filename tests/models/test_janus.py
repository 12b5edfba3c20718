import pytest
import torch

from mmspec.decoding.generate import generate
from mmspec.core.sampling import SamplingConfig
from mmspec.models.janus import JanusCondition, JanusImageGenerator
from tests.helpers.tiny_models import JANUS_GRID, janus_inputs, tiny_janus

PROMPTS = ["a cat", "red dog blue green"]  # different lengths: the first row is left-padded


@pytest.fixture(scope="module")
def janus():
    model, processor = tiny_janus()
    enc = janus_inputs(processor, PROMPTS)
    return model, processor, JanusCondition(enc.input_ids, enc.attention_mask), JanusImageGenerator(model)


def full_logits(model, ids, mask, codes):
    """Teacher-forced generation-head logits `[B, T, V]` of `codes` after the prompts,
    embedded as transformers' image mode does, with position ids `cumsum(mask) - 1`."""
    embeds = torch.cat([model.get_input_embeddings()(ids), model.prepare_embeddings_for_image_generation(codes)], 1)
    mask = torch.cat([mask, torch.ones_like(codes)], 1)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        hidden = model.model.language_model(inputs_embeds=embeds, attention_mask=mask, position_ids=positions).last_hidden_state
        logits = model.model.generation_head(hidden)
    return logits[:, -codes.shape[1] - 1 : -1].float()


def random_codes(batch: int, seed: int = 0) -> torch.Tensor:
    rows, cols = JANUS_GRID
    return torch.randint(12, (batch, rows * cols), generator=torch.Generator().manual_seed(seed))


def ones(shape):
    return torch.ones(shape, dtype=torch.bool)


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


def test_prefill_and_cached_blocks_match_full_forward(janus):
    model, _, condition, generator = janus
    codes = random_codes(2)
    T = codes.shape[1]
    cond = full_logits(model, condition.input_ids, condition.attention_mask, codes)
    uncond = full_logits(model, generator.unconditional_ids(condition.input_ids), condition.attention_mask, codes)
    session = generator.start(condition, guided=True)
    out = [session.prefill_logits()]
    for start, end in [(0, 5), (5, 6), (6, T - 1)]:
        pos = torch.arange(start, end).expand(2, -1)
        out.append(session.forward(codes[:, start:end], pos))
        session.commit(pos, ones(pos.shape))
    torch.testing.assert_close(torch.cat([o.cond for o in out], 1), cond, atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.cat([o.uncond for o in out], 1), uncond, atol=1e-4, rtol=0)


def test_block_written_over_discarded_drafts_matches(janus):
    model, _, condition, generator = janus
    codes = random_codes(2)
    T = codes.shape[1]
    expected = full_logits(model, condition.input_ids, condition.attention_mask, codes)
    session = generator.start(condition, guided=False)
    pos = torch.arange(3).expand(2, -1)
    session.forward(codes[:, :3], pos)
    session.commit(pos, ones(pos.shape))
    session.forward(random_codes(2, seed=1)[:, 3:], torch.arange(3, T).expand(2, -1))  # drafts, never committed
    out = session.forward(codes[:, 3 : T - 1], torch.arange(3, T - 1).expand(2, -1)).cond
    torch.testing.assert_close(out, expected[:, 4:], atol=1e-4, rtol=0)


def test_rows_advance_by_their_own_positions(janus):
    model, _, condition, generator = janus
    codes = random_codes(2)
    expected = full_logits(model, condition.input_ids, condition.attention_mask, codes)
    session = generator.start(condition, guided=False)
    lengths = torch.tensor([2, 7])
    prefix = torch.arange(8).expand(2, -1)
    session.forward(codes[:, :8], prefix)
    session.commit(prefix, prefix < lengths[:, None])
    pos = torch.stack([torch.arange(n, n + 4) for n in lengths.tolist()])
    out = session.forward(codes.gather(1, pos), pos).cond
    torch.testing.assert_close(out, expected.gather(1, (pos + 1)[..., None].expand(-1, -1, 12)), atol=1e-4, rtol=0)


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
