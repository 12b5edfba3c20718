"""The Dia pipeline on the tiny Dia and DAC of tests/fixtures/dia: greedy clips equal
transformers' `generate` for every method with and without guidance, waveforms are the
DAC's on the same codes, keyed sampling returns AR's clips, save/load keeps everything, and
each mistake is one line."""

import numpy as np
import pytest
import torch

from mmspec import DecodingConfig
from mmspec.pipelines.dia import DiaPipeline
from mmspec.pipelines.pipeline_output import SpeechPipelineOutput
from tests.helpers import FIXTURES
from tests.helpers.dia import dia_pipeline

ROOT = FIXTURES / "dia"
METHODS = ["ar", "sjd", "mc-sjd", "keyed", "auto", DecodingConfig.from_name("mc-sjd", branches=2)]


@pytest.fixture(scope="module")
def pipe():
    p = dia_pipeline(torch.float64)
    p.set_progress_bar_config(disable=True)
    return p


@pytest.fixture(scope="module")
def reference():
    return torch.load(ROOT / "reference.pt", weights_only=True)


def greedy(reference, run: str) -> dict:
    settings = reference[run]
    return dict(temperature=0, guidance_scale=settings["guidance_scale"], top_k=settings["top_k"],
                max_new_tokens=reference["max_new_tokens"])


def assert_generate_s_steps(out: SpeechPipelineOutput, reference, run: str) -> None:
    expected = reference[run]["sequences"][:, 1:]  # without the BOS step
    n = expected.shape[1]
    assert out.tokens.shape == (2, reference["max_new_tokens"], 9)
    assert torch.equal(out.tokens[:, :n], expected) and bool((out.tokens[:, n:] == 33).all())


def test_defaults_are_the_checkpoint_s(pipe):
    assert pipe.default_sampling == {"guidance_scale": 3.0, "temperature": 1.2, "top_k": 8, "top_p": 0.95}
    assert pipe.max_new_tokens == 25 + 15 and pipe.voices == [] and pipe.sample_rate == 44100
    assert pipe.dtype == torch.float64 and pipe.codec.dtype == torch.float32 and pipe.device.type == "cpu"
    assert pipe.check_decoding("mc-sjd").method == "mc-sjd"


@pytest.mark.parametrize("decoding", METHODS, ids=lambda d: d if isinstance(d, str) else d.describe())
@pytest.mark.parametrize("run", ["cfg3_top8", "no_cfg"])
def test_greedy_clips_equal_transformers_generate(pipe, reference, decoding, run):
    out = pipe(reference["texts"], decoding=decoding, output_type="tokens", generator=torch.Generator().manual_seed(0),
               **greedy(reference, run))
    assert_generate_s_steps(out, reference, run)
    assert [len(a) for a in out.audios] == [s.lengths.item() for s in out.stats]


def test_waveforms_are_the_dac_s_on_the_codes(pipe, reference):
    run = reference["cfg3_top8"]
    steps = []
    out = pipe(reference["texts"], decoding="mc-sjd", callback_on_step_end=lambda p, i, done, kw: steps.append(done) or kw,
               **greedy(reference, "cfg3_top8"))
    assert_generate_s_steps(out, reference, "cfg3_top8")
    assert out.sample_rate == 44100 and steps and steps == sorted(steps)
    for audio, codes, expected_codes, expected in zip(out.audios, out.codes, run["codes"], run["waveforms"]):
        assert torch.equal(codes, expected_codes)
        direct = pipe.codec.decode(audio_codes=codes[None]).audio_values[0].clamp(-1, 1)
        assert audio.dtype == torch.float32 and audio.shape == direct.shape == expected.shape == (4 * codes.shape[1],)
        assert torch.equal(audio, direct)
        torch.testing.assert_close(audio, expected, atol=1e-5, rtol=0)  # transformers' DiaProcessor.batch_decode
    audios, stats = pipe(reference["texts"][:1], decoding="ar", output_type="np", return_dict=False, **greedy(reference, "cfg3_top8"))
    assert isinstance(audios[0], np.ndarray) and np.array_equal(audios[0], out.audios[0].numpy()) and len(stats) == 1


@pytest.mark.parametrize("guidance_scale", [1.0, 3.0])
def test_sampled_auto_returns_ar_s_clips(pipe, reference, guidance_scale):
    """The default sampling (temperature 1.2, top-k 8, top-p 0.95), two clips per text."""
    for seed in (0, 1):
        kwargs = dict(guidance_scale=guidance_scale, num_audios_per_prompt=2, output_type="tokens")
        ar = pipe(reference["texts"], decoding="ar", generator=torch.Generator().manual_seed(seed), **kwargs)
        auto = pipe(reference["texts"], decoding="auto", generator=torch.Generator().manual_seed(seed), **kwargs)
        assert len(auto.audios) == 4 and torch.equal(auto.tokens, ar.tokens)
        assert all(torch.equal(a, b) for a, b in zip(auto.codes, ar.codes))


def test_save_and_load_round_trip(pipe, reference, tmp_path):
    pipe.save_pretrained(tmp_path)
    loaded = DiaPipeline.from_pretrained(tmp_path, torch_dtype=torch.float64)
    loaded.set_progress_bar_config(disable=True)
    assert loaded.default_sampling == pipe.default_sampling and loaded.max_new_tokens == pipe.max_new_tokens
    assert loaded.codec.dtype == torch.float32
    for name, value in pipe.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], value)
    out = loaded(reference["texts"], decoding="keyed", output_type="tokens", **greedy(reference, "cfg3_top8"))
    assert_generate_s_steps(out, reference, "cfg3_top8")


@pytest.mark.parametrize("kwargs, message", [
    (dict(prompt=""), "prompt must be a non-empty string or a non-empty list of non-empty strings, got ''"),
    (dict(prompt="[S1] " + "é" * 32), r"prompt 0 is 66 tokens long \(its bytes; \[S1\] and \[S2\] one each\), more than the 64 "
                                   "Dia's text encoder reads; shorten or split it"),
    (dict(output_type="pil"), "unknown output_type 'pil'; choose from pt, np, tokens"),
    (dict(num_audios_per_prompt=0), "num_audios_per_prompt must be an integer >= 1, got 0"),
    (dict(voice="tara"), "Dia has no named voices .* give voice=None, got 'tara'"),
    (dict(temperature=0.5), "Dia samples at temperature 0 .greedy. or >= 1 .* got 0.5"),
    (dict(guidance_scale=0.5), "Dia's guidance_scale must be 1 .off. or a finite number > 1, got 0.5"),
    (dict(max_new_tokens=15), "max_new_tokens must be a whole number > the largest delay 15, got 15"),
])
def test_mistakes_are_refused_in_one_line(pipe, kwargs, message):
    kwargs = {"prompt": "[S1] Hi.", **kwargs}
    with pytest.raises(ValueError, match=message) as error:
        pipe(**kwargs)
    assert "\n" not in str(error.value)


def test_from_dia_refuses_a_missing_folder(tmp_path):
    with pytest.raises(ValueError, match="is not a directory holding the Dia checkpoint"):
        DiaPipeline.from_dia(tmp_path / "nothing", ROOT / "dac")
