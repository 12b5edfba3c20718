"""The overlap diagnostic: its distributions are the decoder's, guided as MusicGen guides
(checked against transformers' plain uncached forward), and its overlaps lie in [0, 1]
with the pattern's pad slots left out."""

import torch

from benchmarks.studies import audio_overlap
from mmspec.pipelines.audio import SpeechPipeline
from tests.helpers.tiny_speech import tiny_speech_pipeline


def test_next_step_probs_are_the_decoders_guided_distribution():
    tiny = tiny_speech_pipeline()
    pipe = SpeechPipeline(tiny.decoder, tiny.condition, tiny.codec, frames=tiny.frames, default_sampling={"guidance_scale": 3.0})
    pipe.set_progress_bar_config(disable=True)
    steps = pipe("one", decoding="ar", generator=torch.Generator().manual_seed(0)).tokens  # [1, T, K]
    T, K, V = steps.shape[1], pipe.codebooks, pipe.decoder.config.vocab_size
    word = pipe.condition.word_ids(["one"])
    # transformers' own forward over the start token and the steps, guided by hand
    start = torch.full((1, 1, K), pipe.decoder.config.decoder_start_token_id)
    ids = torch.cat([start, steps], 1)[:, :T].permute(0, 2, 1).reshape(K, T)
    states, mask = pipe.condition(word)
    with torch.no_grad():
        cond = pipe.decoder(input_ids=ids, encoder_hidden_states=states, encoder_attention_mask=mask).logits
        null = pipe.decoder(input_ids=ids, encoder_hidden_states=torch.zeros_like(states),
                            encoder_attention_mask=torch.zeros_like(mask)).logits
    reference = (null + 3.0 * (cond - null)).view(K, T, V).permute(1, 0, 2).softmax(-1)
    mine = audio_overlap.next_step_probs(pipe, steps, word)[0]
    free = steps[0] != V
    assert torch.allclose(mine[free][:, :V], reference[free], atol=1e-5)


def test_overlaps_are_probabilities_with_pad_slots_left_out():
    pipe = tiny_speech_pipeline()
    pipe.set_progress_bar_config(disable=True)
    overlap = audio_overlap.overlaps(pipe, "two", seed=1)
    steps = pipe("two", decoding="ar", generator=torch.Generator().manual_seed(1)).tokens[0]
    assert overlap.shape == (steps.shape[0] - 1, pipe.codebooks)
    pad = steps[1:] == pipe.decoder.config.vocab_size
    assert torch.equal(overlap.isnan(), pad)
    assert ((overlap[~pad] >= -1e-6) & (overlap[~pad] <= 1 + 1e-6)).all()
    assert overlap[~pad].min() < 1  # the tiny random decoder does look at its previous step
