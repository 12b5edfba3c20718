"""The overlap diagnostic: its uncached transformers forward gives the engine's guided
distribution, and its overlaps lie in [0, 1] with the pattern's pad slots left out."""

import torch

from mmspec.core.sampling import SamplingConfig, target_probs
from tests.pipelines.tiny_speech import tiny_speech_pipeline
from tests.training_scripts import load_script


def test_next_step_probs_are_the_engines_guided_distribution():
    module = load_script("audio_overlap", folder="benchmarks")
    pipe = tiny_speech_pipeline()
    pipe.set_progress_bar_config(disable=True)
    steps = pipe("one", decoding="ar", generator=torch.Generator().manual_seed(0)).tokens  # [1, T, K]
    T, K, V = steps.shape[1], pipe.codebooks, pipe.decoder.config.vocab_size
    lm, word = pipe.token_model(T), pipe.condition.word_ids(["one"])
    session = lm.start(word, guided=True)
    with torch.no_grad():
        logits = session.forward(steps[:, :-1], torch.arange(T - 1)[None])
    first = session.prefill_logits()
    guided = type(logits)(torch.cat([first.cond, logits.cond], 1), torch.cat([first.uncond, logits.uncond], 1))
    positions = torch.arange(T)[None]
    engine = target_probs(guided, positions, SamplingConfig(guidance_scale=3.0), lm.layout().allowed_at(positions))
    start = torch.full((1, 1, K), pipe.decoder.config.decoder_start_token_id)
    mine = module.next_step_probs(pipe, torch.cat([start, steps], 1), word, 3.0)[:, :T]
    free = steps[0] != V
    assert torch.allclose(mine[0][free], engine[0][free][:, :V], atol=1e-5)


def test_overlaps_are_probabilities_with_pad_slots_left_out():
    module = load_script("audio_overlap", folder="benchmarks")
    pipe = tiny_speech_pipeline()
    pipe.set_progress_bar_config(disable=True)
    overlap = module.overlaps(pipe, "two", seed=1, guidance=3.0)
    steps = pipe("two", decoding="ar", generator=torch.Generator().manual_seed(1)).tokens[0]
    assert overlap.shape == (steps.shape[0] - 1, pipe.codebooks)
    pad = steps[1:] == pipe.decoder.config.vocab_size
    assert torch.equal(overlap.isnan(), pad)
    assert ((overlap[~pad] >= -1e-6) & (overlap[~pad] <= 1 + 1e-6)).all()
    assert overlap[~pad].min() < 1  # the tiny random decoder does look at its previous step
