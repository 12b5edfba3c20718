import pytest
import torch

from mmspec.decoding.generate import generate
from mmspec.core.sampling import SamplingConfig
from mmspec.models.emu3 import Emu3Condition, Emu3ImageGenerator
from tests.helpers.tiny_models import EMU3_GRID, emu3_inputs, tiny_emu3

PROMPTS = ["a cat", "red dog blue green"]  # different lengths: the first row is left-padded
NEGATIVES = ["bad ugly", "blurry bad"]  # equal lengths: transformers' unbatched CFG ignores padding


@pytest.fixture(scope="module")
def emu3():
    model, processor = tiny_emu3()
    enc, neg = emu3_inputs(processor, PROMPTS), emu3_inputs(processor, NEGATIVES)
    condition = Emu3Condition(enc.input_ids, enc.attention_mask, neg.input_ids, neg.attention_mask)
    return model, processor, condition, Emu3ImageGenerator(model, *EMU3_GRID)


def full_logits(model, ids, mask, tokens):
    """Teacher-forced logits `[B, T, V]` of `tokens` after the prompts, by transformers'
    own forward with generate's position ids (`cumsum(mask) - 1`)."""
    ids = torch.cat([ids, tokens], 1)
    mask = torch.cat([mask, torch.ones_like(tokens)], 1)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    return logits[:, -tokens.shape[1] - 1 : -1].float()


def random_tokens(generator: Emu3ImageGenerator, batch: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ids = generator.visual_ids
    return ids[torch.randint(len(ids), (batch, generator.layout_length), generator=g)]


def ones(shape):
    return torch.ones(shape, dtype=torch.bool)


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


def test_prefill_and_cached_blocks_match_full_forward(emu3):
    model, _, condition, generator = emu3
    tokens = random_tokens(generator, 2)
    T = tokens.shape[1]
    cond = full_logits(model, condition.input_ids, condition.attention_mask, tokens)
    uncond = full_logits(model, condition.negative_input_ids, condition.negative_attention_mask, tokens)
    session = generator.start(condition, guided=True)
    out = [session.prefill_logits()]
    for start, end in [(0, 3), (3, 4), (4, T - 1)]:
        pos = torch.arange(start, end).expand(2, -1)
        out.append(session.forward(tokens[:, start:end], pos))
        session.commit(pos, ones(pos.shape))
    torch.testing.assert_close(torch.cat([o.cond for o in out], 1), cond, atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.cat([o.uncond for o in out], 1), uncond, atol=1e-4, rtol=0)


def test_block_written_over_discarded_drafts_matches(emu3):
    model, _, condition, generator = emu3
    tokens = random_tokens(generator, 2)
    T = tokens.shape[1]
    expected = full_logits(model, condition.input_ids, condition.attention_mask, tokens)
    session = generator.start(condition, guided=False)
    pos = torch.arange(2).expand(2, -1)
    session.forward(tokens[:, :2], pos)
    session.commit(pos, ones(pos.shape))
    session.forward(random_tokens(generator, 2, seed=1)[:, 2:], torch.arange(2, T).expand(2, -1))  # drafts, never committed
    out = session.forward(tokens[:, 2 : T - 1], torch.arange(2, T - 1).expand(2, -1)).cond
    torch.testing.assert_close(out, expected[:, 3:], atol=1e-4, rtol=0)


def test_rows_advance_by_their_own_positions(emu3):
    model, _, condition, generator = emu3
    tokens = random_tokens(generator, 2)
    expected = full_logits(model, condition.input_ids, condition.attention_mask, tokens)
    session = generator.start(condition, guided=False)
    lengths = torch.tensor([1, 4])
    prefix = torch.arange(5).expand(2, -1)
    session.forward(tokens[:, :5], prefix)
    session.commit(prefix, prefix < lengths[:, None])
    pos = torch.stack([torch.arange(n, n + 3) for n in lengths.tolist()])
    out = session.forward(tokens.gather(1, pos), pos).cond
    torch.testing.assert_close(out, expected.gather(1, (pos + 1)[..., None].expand(-1, -1, expected.shape[-1])), atol=1e-4, rtol=0)


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


def test_segments_keep_windows_apart(emu3):
    """Two windows in one call with different segments (ZipAR rows) equal each run alone,
    and neither sees the other's uncommitted slots."""
    _, _, condition, generator = emu3
    tokens = random_tokens(generator, 2)

    def fresh():
        session = generator.start(condition, guided=True)
        pos = torch.arange(2).expand(2, -1)
        session.forward(tokens[:, :2], pos)
        session.commit(pos, ones(pos.shape))
        return session

    a_pos, b_pos = torch.arange(2, 4).expand(2, -1), torch.arange(5, 8).expand(2, -1)
    alone_a, alone_b = fresh().forward(tokens[:, 2:4], a_pos), fresh().forward(tokens[:, 5:8], b_pos)
    both_pos = torch.cat([a_pos, b_pos], 1)
    both = fresh().forward(tokens.gather(1, both_pos), both_pos, torch.tensor([0, 0, 1, 1, 1]).expand(2, -1))
    torch.testing.assert_close(both.cond, torch.cat([alone_a.cond, alone_b.cond], 1), atol=1e-5, rtol=0)
    torch.testing.assert_close(both.uncond, torch.cat([alone_a.uncond, alone_b.uncond], 1), atol=1e-5, rtol=0)
