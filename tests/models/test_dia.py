"""Dia under the engine against transformers' own `generate` (tests/fixtures/dia): greedy
steps equal token for token for every method, with and without guidance; the network's
logits equal teacher forcing; keyed sampling returns AR's steps; the codes are those
`DiaProcessor.batch_decode` cuts out."""

import pytest
import torch
import transformers as tf

from mmspec import DecodingConfig, SamplingConfig, generate
from mmspec.models.adapters.delay import delay_pattern
from mmspec.models.adapters.dia import DiaLM
from tests.helpers import FIXTURES

ROOT = FIXTURES / "dia"
METHODS = ["ar", "sjd", "mc-sjd", "keyed", "auto", DecodingConfig.from_name("mc-sjd", branches=2)]


@pytest.fixture(scope="module")
def dia():
    return tf.DiaForConditionalGeneration.from_pretrained(ROOT / "model").double().eval()


@pytest.fixture(scope="module")
def reference():
    return torch.load(ROOT / "reference.pt", weights_only=True)


def text(reference) -> dict:
    return {"input_ids": reference["input_ids"], "attention_mask": reference["attention_mask"]}


def decode(lm: DiaLM, reference, decoding, sampling: SamplingConfig, seed: int = 0):
    return generate(lm, text(reference), decoding, sampling, generator=torch.Generator().manual_seed(seed),
                    stop_tokens=lm.stop_tokens, pad_token_id=lm.pad_id)


def test_bos_before_each_first_frame_is_the_processor_s_delayed_input(dia, reference):
    processor = tf.DiaProcessor(tf.DiaFeatureExtractor(), tf.DiaTokenizer(), None)
    delays = dia.config.delay_pattern
    inputs = processor(text=["[S1] a"], return_tensors="pt", audio_kwargs=dict(bos_token_id=34, pad_token_id=33,
                                                                                 eos_token_id=32, delay_pattern=delays))
    delayed = inputs["decoder_input_ids"][0, 1:]  # [D, C]: the steps after the BOS step
    forced = delay_pattern(len(delayed), delays, 33, start_id=34, pad_end=False)
    assert torch.equal(torch.where(forced >= 0, forced, 33), delayed)
    lm = DiaLM(dia, 40)
    assert torch.equal(lm.channels(lm.layout().forced[None])[0, :len(delayed)], forced)


@pytest.mark.parametrize("decoding", METHODS, ids=lambda d: d if isinstance(d, str) else d.describe())
@pytest.mark.parametrize("run", ["cfg3_top8", "cfg2_top20", "no_cfg"])
def test_greedy_steps_equal_transformers_generate(dia, reference, decoding, run):
    """Guidance 3 with its top-k 8 (both clips end by EOS), guidance 2 with top-k 20 and no
    guidance (one clip ends by EOS, one where the length forces channel 0's end)."""
    expected = reference[run]["sequences"][:, 1:]  # [B, steps, C] without the BOS step
    lm = DiaLM(dia, reference["max_new_tokens"], guidance_scale=reference[run]["guidance_scale"],
               guidance_top_k=reference[run]["top_k"] if reference[run]["guidance_scale"] != 1 else None)
    tokens, stats = decode(lm, reference, decoding, SamplingConfig(temperature=0))
    steps = lm.channels(tokens)
    n = expected.shape[1]
    assert torch.equal(steps[:, :n], expected) and bool((steps[:, n:] == lm.pad_id).all())
    assert stats.lengths.tolist() == [int((row[:, -1] != lm.pad_id).sum()) for row in expected]
    assert stats.forward_passes <= n


def test_network_logits_equal_teacher_forcing(dia, reference):
    run = reference["cfg3_top8"]
    steps = run["sequences"]  # [B, 1 + T, C], the BOS step first
    lm = DiaLM(dia, reference["max_new_tokens"], guidance_scale=3.0, guidance_top_k=8)
    session = lm.start(text(reference), guided=False)
    slots = torch.arange(steps.shape[1]).expand(4, -1)
    logits = session.network_logits(steps.repeat(2, 1, 1), slots, session.cache.attention_mask(slots))
    assert logits.shape == run["logits"].shape
    torch.testing.assert_close(logits, run["logits"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("guidance", [(1.0, None), (3.0, 8), (3.0, None)])
@pytest.mark.parametrize("seed", [0, 1])
def test_sampled_auto_returns_ar_s_steps(dia, reference, guidance, seed):
    """Keyed sampling at temperature 1.2 with top-k 8 and top-p 0.95 (guidance 3 without its
    top-k is `c + s (c - u)`, a mode transformers' Dia does not offer)."""
    scale, top_k = guidance
    lm = DiaLM(dia, reference["max_new_tokens"], guidance_scale=scale, guidance_top_k=top_k)
    sampling = SamplingConfig(temperature=1.2, top_k=8, top_p=0.95)
    ar, ar_stats = decode(lm, reference, "ar", sampling, seed)
    auto, auto_stats = decode(lm, reference, "auto", sampling, seed)
    assert torch.equal(auto, ar) and torch.equal(auto_stats.lengths, ar_stats.lengths)
    forced = lm.layout().forced
    for row, n in zip(ar, ar_stats.lengths.tolist()):
        assert bool((row[:n][forced[:n] >= 0] == forced[:n][forced[:n] >= 0]).all())
        assert int((row[:n, 0] == lm.eos_id).sum()) == 1 and row[n - 1, 0] == lm.eos_id  # the last channel's EOS ends it


def test_codes_are_the_ones_the_processor_decodes(dia, reference):
    run = reference["cfg3_top8"]
    lm = DiaLM(dia, reference["max_new_tokens"], guidance_scale=3.0, guidance_top_k=8)
    tokens, stats = decode(lm, reference, "mc-sjd", SamplingConfig(temperature=0))
    codes = lm.codes(tokens, stats.lengths)
    assert len(codes) == len(run["codes"]) and all(torch.equal(a, b) for a, b in zip(codes, run["codes"]))


def test_wrong_arguments_are_refused(dia, reference):
    with pytest.raises(ValueError, match="max_new_tokens must be a whole number > the largest delay 15, got 15"):
        DiaLM(dia, 15)
    with pytest.raises(ValueError, match="guidance_scale must be 1 .off. or a finite number > 1, got 0.5"):
        DiaLM(dia, 20, guidance_scale=0.5)
    with pytest.raises(ValueError, match="guidance_top_k must be None or a whole number >= 1, got 0"):
        DiaLM(dia, 20, guidance_scale=2.0, guidance_top_k=0)
    with pytest.raises(ValueError, match="sample with guidance_scale=1"):
        decode(DiaLM(dia, 20), reference, "ar", SamplingConfig(guidance_scale=3.0))
    llama = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                               num_attention_heads=2))
    with pytest.raises(ValueError, match="DiaLM serves DiaForConditionalGeneration; got 'llama'"):
        DiaLM(llama, 20)
