"""The speech training script: its delay pattern is MusicGen's, the loss skips the forced
slots, input noise hits each codebook at its own rate with uniform codes or the decoder's own
redraws, and the clip cache continues where an interrupted run stopped."""

import shutil

import pytest
import torch

from mmspec.models.adapters.musicgen import delay_pattern, undelay
from scripts import train_speech_model as script


# the spoken-digit clips are spoken by espeak-ng, a Debian package that .ci/run installs
NEEDS_ESPEAK = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng, a Debian package (.ci/run installs it)")


def test_delayed_steps_follow_the_pattern_and_undelay_back():
    codes = torch.randint(64, (2, 4, 6))
    steps = script.delayed_steps(codes)
    assert steps.shape == (2, 9, 4)
    assert torch.equal(steps[0] == 64, delay_pattern(9, 4, 64) >= 0)
    assert torch.equal(undelay(steps, 4), codes)


def untrained_lm_and_batch(script):
    """A seeded untrained decoder, and two clips' delayed steps (6 frames) with their words."""
    torch.manual_seed(0)
    return script.SpeechLM().eval(), script.delayed_steps(torch.randint(64, (2, 4, 6))), torch.tensor([1, 2])


def test_the_loss_ignores_forced_slots():
    lm, steps, words = untrained_lm_and_batch(script)
    null = torch.tensor([False, True])
    loss = script.lm_loss(lm, steps, words, null)
    assert torch.isfinite(loss) and 3.0 < float(loss) < 6.0  # about log(64) for an untrained model


def test_input_noise_hits_each_codebook_at_its_rate_and_keeps_the_pattern():
    steps = script.delayed_steps(torch.randint(64, (400, 4, 48)))
    noisy = script.noisy_inputs(steps, (0.0, 0.1, 0.3, 0.6), torch.Generator().manual_seed(0))
    pad = steps == 64
    assert torch.equal(noisy == 64, pad)  # the forced slots stay forced; no random code is the pad
    changed = (noisy != steps) & ~pad
    rates = changed.sum((0, 1)) / (~pad).sum((0, 1))
    # a random code equals the true one 1 time in 64
    assert rates.tolist() == pytest.approx([0.0, 0.1 * 63 / 64, 0.3 * 63 / 64, 0.6 * 63 / 64], abs=0.01)
    again = script.noisy_inputs(steps, (0.0, 0.1, 0.3, 0.6), torch.Generator().manual_seed(0))
    assert torch.equal(noisy, again)


def test_the_loss_reads_the_given_inputs_and_scores_the_clean_steps():
    lm, steps, words = untrained_lm_and_batch(script)
    null = torch.tensor([False, False])
    noisy = script.noisy_inputs(steps, (0.5,) * 4, torch.Generator().manual_seed(0))
    clean = script.lm_loss(lm, steps, words, null)
    assert torch.equal(script.lm_loss(lm, steps, words, null, steps), clean)
    assert not torch.equal(script.lm_loss(lm, steps, words, null, noisy), clean)
    # the targets are `steps` whatever the inputs: scoring the noisy codes is another loss
    assert not torch.equal(script.lm_loss(lm, noisy, words, null, noisy), script.lm_loss(lm, steps, words, null, noisy))


@NEEDS_ESPEAK
def test_input_noise_takes_the_given_replacements():
    steps = script.delayed_steps(torch.randint(64, (50, 4, 48)))
    replacements = (steps + 1) % 64
    noisy = script.noisy_inputs(steps, (0.2, 0.5, 0.5, 1.0), torch.Generator().manual_seed(0), replacements)
    pad = steps == 64
    assert torch.equal(noisy == 64, pad)
    hit = noisy != steps
    assert torch.equal(noisy[hit], replacements[hit])
    assert torch.equal(hit[..., 3], ~pad[..., 3])  # share 1: every code of the last codebook


@pytest.mark.slow
@pytest.mark.statistical
def test_redrawn_codes_follow_the_decoders_distribution_given_the_true_codes_before():
    lm, steps, words = untrained_lm_and_batch(script)
    null = torch.tensor([False, False])
    with torch.no_grad():
        lm.decoder.lm_heads[1].weight.mul_(20.0)  # a peaked codebook, so that the draws are not near uniform
        probs = script.lm_logits(lm, steps, words, null).float().softmax(-1)
        later_changed = steps.clone()
        later_changed[:, 5:] = torch.where(later_changed[:, 5:] == 64, 64, (later_changed[:, 5:] + 7) % 64)
        # slot t's distribution reads the codes before t only
        assert torch.allclose(script.lm_logits(lm, later_changed, words, null)[:, :5], script.lm_logits(lm, steps, words, null)[:, :5])
    n = 4000
    many = steps[:1].expand(n, -1, -1)
    draws = script.redrawn_codes(lm, many, words[:1].expand(n), null[:1].expand(n), torch.Generator().manual_seed(0))
    assert draws.shape == many.shape and int(draws.max()) < 64
    freq = torch.bincount(draws[:, 4, 1], minlength=64) / n
    assert (freq - probs[0, 4, 1]).abs().max() < 0.03
    assert float(probs[0, 4, 1].max()) > 0.2  # the check above is not of a flat distribution
    again = script.redrawn_codes(lm, many, words[:1].expand(n), null[:1].expand(n), torch.Generator().manual_seed(0))
    assert torch.equal(draws, again)


@NEEDS_ESPEAK
def test_clip_cache_continues_an_interrupted_run(tmp_path, monkeypatch):
    monkeypatch.setattr(script, "CLIP_CHUNK", 2)
    first, _ = script.cached_clips(tmp_path, "heldout", 2)
    audio, labels = script.cached_clips(tmp_path, "heldout", 3)
    assert torch.equal(audio[:2], first) and labels.tolist() == [0, 1, 2]
    assert len(torch.load(tmp_path / "clips-heldout.pt", weights_only=True)["labels"]) == 3


@NEEDS_ESPEAK
def test_code_cache_continues_an_interrupted_run_and_codes_the_clips(tmp_path, monkeypatch):
    from mmspec.assets import SPEECH_ASSETS
    from mmspec.datasets.spoken_digits import load_split
    from mmspec.tokenizers.audio_codec import MelCodec

    monkeypatch.setattr(script, "CLIP_CHUNK", 2)
    codec = MelCodec.from_pretrained(SPEECH_ASSETS / "codec")
    first, _ = script.cached_codes(tmp_path, codec, 2)
    codes, labels = script.cached_codes(tmp_path, codec, 3)
    assert codes.shape == (3, codec.config.codebooks, script.FRAMES) and torch.equal(codes[:2], first)
    assert torch.equal(codes, codec.encode(load_split("train", 3)[0])) and labels.tolist() == [0, 1, 2]
    assert len(torch.load(tmp_path / "codes-train.pt", weights_only=True)["labels"]) == 3
    # clips already spoken are encoded, not spoken again: here silent stand-ins for the first 2
    silent = (torch.zeros(2, script.CLIP_SAMPLES), torch.tensor([7, 7]))
    (tmp_path / "spoken").mkdir()
    codes, labels = script.cached_codes(tmp_path / "spoken", codec, 3, silent)
    assert torch.equal(codes[:2], codec.encode(silent[0])) and labels.tolist() == [7, 7, 2]
    assert torch.equal(codes[2], codec.encode(load_split("train", 3)[0])[2])


def test_init_from_starts_the_decoder_and_word_table_from_the_given_weights(tmp_path):
    torch.manual_seed(5)  # train_lm seeds seed + 1 itself
    init = script.SpeechLM()
    _, steps, words = untrained_lm_and_batch(script)
    lm = script.train_lm(tmp_path, 0, steps, words, 0, init=init)  # no step: the starting point itself
    for mine, given in ((lm.decoder, init.decoder), (lm.condition, init.condition)):
        for (name, a), b in zip(mine.state_dict().items(), given.state_dict().values()):
            assert torch.equal(a, b), name
    fresh = script.train_lm(tmp_path / "fresh", 0, steps, words, 0)
    assert not torch.equal(fresh.condition.embedding.weight, init.condition.embedding.weight)
