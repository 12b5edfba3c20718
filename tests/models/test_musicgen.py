"""MusicGen under the engine: its delay pattern as a layout, greedy output equal to
transformers' `generate` with guidance on and off, K = 4 codebooks."""

import pytest
import torch
import transformers as tf

from mmspec import DecodingConfig, SamplingConfig, generate
from mmspec.models.adapters.musicgen import MusicgenLM, delay_pattern

V, K = 32, 4


@pytest.fixture(scope="module")
def musicgen():
    torch.manual_seed(0)
    text = tf.T5Config(vocab_size=50, d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8)
    # 100 Hz audio, 4x upsampling: 25 frames a second, 12 quantizers of V codes at 3 kbps
    audio = tf.EncodecConfig(codebook_size=V, hidden_size=8, num_filters=4, num_residual_layers=1, upsampling_ratios=[2, 2],
                             codebook_dim=8, target_bandwidths=[1.5, 3.0], sampling_rate=100, num_lstm_layers=1)
    decoder = tf.MusicgenDecoderConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
                                       num_codebooks=K, max_position_embeddings=64, pad_token_id=V,
                                       decoder_start_token_id=V, bos_token_id=V)
    config = tf.MusicgenConfig(text_encoder=text.to_dict(), audio_encoder=audio.to_dict(), decoder=decoder.to_dict())
    model = tf.MusicgenForConditionalGeneration(config).double().eval()
    model.generation_config.pad_token_id = model.generation_config.decoder_start_token_id = V
    return model


PROMPTS = dict(input_ids=torch.tensor([[5, 6, 7, 1], [8, 9, 1, 0]]), attention_mask=torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]))


def transformers_codes(model, steps: int, guidance_scale: float) -> torch.Tensor:
    """The EnCodec codes `[B, K, F]` transformers' generate decodes, caught on their way to the codec."""
    caught = {}
    decode = model.audio_encoder.decode

    def catch(codes, **kwargs):
        caught["codes"] = codes[0]
        return decode(codes, **kwargs)

    model.audio_encoder.decode = catch
    try:
        model.generate(**PROMPTS, max_new_tokens=steps, do_sample=False, guidance_scale=guidance_scale)
    finally:
        model.audio_encoder.decode = decode
    return caught["codes"]


def test_delay_pattern_is_musicgen_s(musicgen):
    steps = 10
    start = torch.full((2 * K, 1), V)
    _, pattern = musicgen.decoder.build_delay_pattern_mask(start, V, max_length=steps + 1)
    expected = pattern.view(2, K, -1)[0, :, 1:].T  # [steps, K]: generated columns
    assert torch.equal(delay_pattern(steps, K, V), expected)


@pytest.mark.parametrize("decoding", ["ar", "sjd", "mc-sjd", DecodingConfig.from_name("mc-sjd", branches=2)],
                         ids=lambda d: d if isinstance(d, str) else d.describe())
@pytest.mark.parametrize("guidance_scale", [1.0, 3.0])
def test_greedy_matches_transformers_generate(musicgen, decoding, guidance_scale):
    steps = 12
    lm = MusicgenLM(musicgen, steps)
    tokens, stats = generate(lm, PROMPTS, decoding, SamplingConfig(temperature=0, guidance_scale=guidance_scale),
                             generator=torch.Generator().manual_seed(0))
    assert tokens.shape == (2, steps, K)
    assert torch.equal(lm.frames(tokens), transformers_codes(musicgen, steps, guidance_scale))
    assert stats.forward_passes <= steps


def test_sampled_steps_hold_the_pad_id_exactly_where_the_pattern_puts_it(musicgen):
    steps = 10
    lm = MusicgenLM(musicgen, steps)
    tokens, _ = generate(lm, PROMPTS, "mc-sjd", SamplingConfig(guidance_scale=3.0), generator=torch.Generator().manual_seed(1))
    forced = delay_pattern(steps, K, V) >= 0
    assert bool((tokens[:, forced] == V).all()) and bool((tokens[:, ~forced] < V).all())
    audio = lm.decode_audio(tokens)
    assert audio.shape[:2] == (2, 1) and bool(torch.isfinite(audio).all())


def test_grouped_acceptance_runs_on_the_codec_codebooks(musicgen):
    steps = 10
    lm = MusicgenLM(musicgen, steps)
    assert lm.layout().token_embeddings.shape == (K, V + 1, 8)
    tokens, stats = generate(lm, PROMPTS, "mc-sjd+pcg", SamplingConfig(guidance_scale=3.0),
                             generator=torch.Generator().manual_seed(1))
    forced = delay_pattern(steps, K, V) >= 0
    assert bool((tokens[:, forced] == V).all()) and bool((tokens[:, ~forced] < V).all())
    assert not stats.exact and stats.forward_passes <= steps


def test_too_few_steps_and_other_models_are_refused(musicgen):
    with pytest.raises(ValueError, match="max_new_tokens must be a whole number >= the 4 codebooks, got 3"):
        MusicgenLM(musicgen, 3)
    llama = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                               num_attention_heads=2))
    with pytest.raises(ValueError, match="serves MusicgenForConditionalGeneration or MusicgenForCausalLM; got .llama."):
        MusicgenLM(llama, 8)
