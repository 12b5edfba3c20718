"""OrpheusPipeline against the original Orpheus code path (tests/fixtures/orpheus): greedy tokens,
logits, codes, streamed and whole-clip audio; keyed sampling equal to AR; losslessness of
sampling on a tiny Orpheus-layout model; save/load; one-line errors."""

import json

import numpy as np
import pytest
import torch
import transformers as tf

import mmspec
from mmspec import DecodingConfig, load_pipeline
from mmspec.core.noise import Noise
from mmspec.core.processors import RepetitionPenalty
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.generate import generate
from mmspec.metrics.losslessness import chi_square, sequence_probs
from mmspec.models.adapters.orpheus import FRAME, OrpheusFormat, OrpheusLM
from mmspec.pipelines.orpheus import AudioStream, OrpheusPipeline, clip_seed
from mmspec.tokenizers.snac_codec import SnacCodec
from tests.helpers.orpheus import ROOT, VOICES, fixture_format, orpheus_pipeline, reference


@pytest.fixture(scope="module")
def pipe():
    return orpheus_pipeline()


def clip_tokens(out, row: int) -> list[int]:
    return out.tokens[row, : int(out.stats[row].lengths[0])].tolist()


def test_prompts_are_framed_as_orpheus_frames_them(pipe):
    for ref in reference():
        assert pipe.prompt_ids(ref["text"], ref["voice"]) == ref["prompt_ids"]


EXACT = ["ar", "sjd", "mc-sjd", "keyed", "auto", "keyed+previous-frame", "mc-sjd+lookup"]
BRANCHED = [DecodingConfig.from_name("mc-sjd", branches=2), DecodingConfig.from_name("keyed", branches=2)]


@pytest.mark.parametrize("decoding", EXACT + BRANCHED, ids=lambda d: d if isinstance(d, str) else d.describe())
def test_greedy_tokens_equal_the_originals(pipe, decoding):
    """transformers' greedy generate with Orpheus's prompt, repetition penalty 1.3 and stop
    token: the same tokens from every exact method, the three prompts batched (one stops
    after four frames, two run the full six); with branches (whose nodes each run the
    penalty on their own history, over the fixture's 28,746 ids: slow on a CPU), the two
    shortest."""
    refs = reference() if decoding in EXACT else sorted(reference(), key=lambda r: len(r["prompt_ids"]))[:2]
    out = pipe([r["text"] for r in refs], voice=[r["voice"] for r in refs], decoding=decoding, temperature=0)
    for row, ref in enumerate(refs):
        assert clip_tokens(out, row) == ref["tokens"]


def test_teacher_forced_logits_match(pipe):
    lm = pipe.token_model()
    for ref in reference():
        session = lm.start({"input_ids": torch.tensor([ref["prompt_ids"]])}, guided=False)
        tokens = torch.tensor([ref["tokens"][:-1]])
        logits = torch.cat([session.prefill_logits().cond, session.forward(tokens, torch.arange(tokens.shape[1])[None]).cond], 1)[0]
        start = fixture_format()["audio_format"]["audio_token_start"] + (torch.arange(len(logits)) % FRAME) * 4096
        own = logits.gather(1, start[:, None] + torch.arange(4096))
        torch.testing.assert_close(own, ref["own_range_logits"], atol=1e-5, rtol=0)
        torch.testing.assert_close(logits[:, pipe.audio_format.stop_token_id], ref["stop_logits"], atol=1e-5, rtol=0)


def test_codes_and_waveform_are_the_codecs(pipe):
    """Codes as Orpheus's `turn_token_into_id` maps the tokens; the clip is SNAC's decode of
    them, its noise from the clip's key (the fixture's whole-clip decode under its seed)."""
    refs = reference()
    out = pipe([r["text"] for r in refs], voice=[r["voice"] for r in refs], temperature=0, generator=torch.Generator().manual_seed(3))
    noise = Noise.from_generator(torch.Generator().manual_seed(3), len(refs))
    for row, ref in enumerate(refs):
        frames = torch.tensor(ref["codes"]).reshape(-1, FRAME)
        levels = [frames[:, [0]].reshape(1, -1), frames[:, [1, 4]].reshape(1, -1), frames[:, [2, 3, 5, 6]].reshape(1, -1)]
        for got, want in zip(out.codes[row], levels):
            assert torch.equal(got, want)
        torch.testing.assert_close(pipe.codec.decode(levels, fixture_format()["full_decode_seed"])[0], ref["waveform"].clamp(-1, 1))
        torch.testing.assert_close(out.audios[row], pipe.codec.decode(levels, clip_seed(noise, row))[0])
        assert out.audios[row].shape == (len(frames) * 4 * pipe.codec.hop_length,)


def test_streamed_audio_is_orpheus_s(pipe):
    """Fed the committed tokens as a decode commits them, `AudioStream` sends the chunks
    Orpheus's `tokens_decoder` yields (int16, as it writes them), then none twice."""
    for ref in reference():
        chunks = []
        stream = AudioStream(pipe.audio_format, pipe.codec, [fixture_format()["stream_seed"]], lambda row, a: chunks.append(a))
        tokens = torch.full((1, 7 * fixture_format()["frames"]), -1)
        for n in range(0, len(ref["tokens"]) + 1, 3):
            tokens[0, :n] = torch.tensor(ref["tokens"][:n])
            stream(tokens)
        tokens[0, : len(ref["tokens"])] = torch.tensor(ref["tokens"])
        stream(tokens)
        assert len(chunks) == len(ref["stream"])
        for got, want in zip(chunks, ref["stream"]):
            assert torch.equal(torch.from_numpy((got.numpy() * 32767).astype(np.int16)), want)


def test_a_call_streams_its_clips(pipe):
    got = {}
    out = pipe(["ok", "hi there."], temperature=0, callback_on_audio=lambda row, a: got.setdefault(row, []).append(a))
    for row in range(2):
        frames = len(out.codes[row][0][0])
        assert len(got.get(row, [])) == max(frames - 3, 0)
        assert all(a.shape == (4 * pipe.codec.hop_length,) for a in got.get(row, []))


def test_sampled_auto_and_keyed_give_ar_s_clips(pipe):
    """Orpheus's sampling (temperature 0.6, top-p 0.8, repetition penalty 1.3): the default
    decoding gives AR's tokens and audio for the seed, batched or one clip at a time."""
    texts = ["hi there.", "ok", "a longer line, said slowly!"]
    ar = pipe(texts, voice="tara", decoding="ar", generator=torch.Generator().manual_seed(11))
    for decoding in ("auto", "keyed+previous-frame", DecodingConfig.from_name("keyed", branches=2)):
        out = pipe(texts, voice="tara", decoding=decoding, generator=torch.Generator().manual_seed(11))
        assert torch.equal(out.tokens, ar.tokens)
        assert all(torch.equal(a, b) for a, b in zip(out.audios, ar.audios))
    gens = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    batch = pipe(texts, voice="leo", generator=gens)
    for row, seed in enumerate((1, 2, 3)):
        alone = pipe(texts[row], voice="leo", decoding="ar", generator=torch.Generator().manual_seed(seed))
        assert clip_tokens(batch, row) == clip_tokens(alone, 0)
        assert torch.equal(batch.audios[row], alone.audios[0])


def test_save_and_load_round_trip(pipe, tmp_path):
    pipe.save_pretrained(tmp_path / "orpheus")
    loaded = load_pipeline(tmp_path / "orpheus")
    assert isinstance(loaded, mmspec.OrpheusPipeline) and loaded.voices == VOICES
    assert loaded.audio_format == pipe.audio_format and loaded.default_sampling == pipe.default_sampling
    a = pipe("ok", generator=torch.Generator().manual_seed(0))
    b = loaded("ok", generator=torch.Generator().manual_seed(0))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.audios[0], b.audios[0])


def test_from_orpheus_reads_checkpoint_and_codec_folders(tmp_path):
    """A transformers-layout checkpoint folder (weights and tokenizer side by side) and a SNAC
    folder as published (`pytorch_model.bin`, weight norm as weight_g / weight_v)."""
    ref_pipe = orpheus_pipeline()
    ref_pipe.model.save_pretrained(tmp_path / "ckpt")
    ref_pipe.tokenizer.save_pretrained(tmp_path / "ckpt")
    snac = tmp_path / "snac"
    snac.mkdir()
    (snac / "config.json").write_text((ROOT / "snac" / "config.json").read_text())
    old_style = {}
    for key, value in ref_pipe.codec.model.state_dict().items():
        key = key.replace(".parametrizations.weight.original0", ".weight_g").replace(".parametrizations.weight.original1", ".weight_v")
        old_style[key] = value
    torch.save(old_style, snac / "pytorch_model.bin")
    pipe = OrpheusPipeline.from_orpheus(tmp_path / "ckpt", snac, voices=VOICES, audio_format=fixture_format()["audio_format"],
                                        max_new_tokens=42)
    ref = reference()[1]
    assert clip_tokens(pipe(ref["text"], voice=ref["voice"], temperature=0), 0) == ref["tokens"]


@pytest.mark.parametrize("call, message", [
    (lambda p: p("hi", voice="zeus"), "unknown voice 'zeus'"),
    (lambda p: p("  "), "non-empty"),
    (lambda p: p("hi " * 40), "exceed the model's context"),
    (lambda p: p("hi", max_new_tokens=3), "max_new_tokens must be"),
    (lambda p: p("hi", guidance_scale=2.0), "guidance_scale must be 1"),
    (lambda p: p("hi", decoding="sjd+lantern"), "text decoding is exact"),
    (lambda p: p("hi", decoding="mc-sjd+above"), "draft init"),
    (lambda p: p("hi", decoding="keyed+previous-step"), "draft init"),
    (lambda p: p("hi", repetition_penalty=0), "repetition_penalty"),
    (lambda p: p(["a", "b"], voice=["tara"]), "one voice or one per text"),
])
def test_bad_calls_get_one_line_errors(pipe, call, message):
    with pytest.raises(ValueError, match=message) as err:
        call(pipe)
    assert "\n" not in str(err.value)


def test_bad_folders_and_codecs_get_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="is not a folder holding an Orpheus-format checkpoint"):
        OrpheusPipeline.from_orpheus(tmp_path / "nothing", ROOT / "snac")
    with pytest.raises(ValueError, match="is not a folder holding a SNAC codec"):
        SnacCodec.from_pretrained(tmp_path / "nothing")
    small = SnacCodec({**json.loads((ROOT / "snac" / "config.json").read_text()), "codebook_size": 16})
    good = orpheus_pipeline()
    with pytest.raises(ValueError, match="mismatched codec"):
        OrpheusPipeline(good.model, good.tokenizer, small, audio_format=fixture_format()["audio_format"])
    with pytest.raises(ValueError, match="do not reach the Orpheus format's audio ids"):
        OrpheusPipeline(good.model, good.tokenizer, good.codec)  # Orpheus's own ids, past this tiny vocabulary
    (tmp_path / "no_weights").mkdir()
    (tmp_path / "no_weights" / "config.json").write_text((ROOT / "snac" / "config.json").read_text())
    with pytest.raises(ValueError, match="holds no SNAC weights"):
        OrpheusPipeline.from_orpheus(ROOT / "lm", tmp_path / "no_weights")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text('{"codebook_size": "big"}')
    with pytest.raises(ValueError, match="codebook_size must be a whole number"):
        SnacCodec.from_pretrained(tmp_path / "bad")


@pytest.mark.statistical
@pytest.mark.parametrize("decoding", ["sjd", "mc-sjd", "auto"])
def test_sampling_a_tiny_orpheus_layout_is_lossless(decoding):
    """A one-frame clip of a tiny Orpheus-layout Llama (two codes a slot, the stop token
    first or not): each of its 129 outcomes is drawn as often as Orpheus's temperature 0.6
    and top-p 0.8 say; chi-square at a fixed seed. (The repetition penalty runs but changes
    nothing within one frame: no slot's ids repeat.)"""
    torch.manual_seed(0)
    audio_format = OrpheusFormat(audio_token_start=10, codebook_size=2, stop_token_id=3, prompt_prefix=(4,), prompt_suffix=(5,))
    config = tf.LlamaConfig(vocab_size=24, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    model = tf.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8)
    lm = OrpheusLM(model, 1, audio_format)
    prompt = torch.tensor([[4, 1, 2, 5]])
    # exact probabilities: the 128 full frames, and the stop token at once
    codes = torch.stack(torch.meshgrid(*[torch.arange(2)] * FRAME, indexing="ij"), -1).reshape(-1, FRAME)
    frames = 10 + torch.arange(FRAME) * 2 + codes
    sampling = SamplingConfig(temperature=0.6, top_p=0.8)
    full = sequence_probs(lm, {"input_ids": prompt.expand(len(frames), -1)}, frames, sampling)
    n = 12000
    tokens, _ = generate(lm, {"input_ids": prompt.expand(n, -1)}, decoding, sampling, torch.Generator().manual_seed(4),
                         stop_tokens=[3], pad_token_id=3, processors=[RepetitionPenalty(1.3)])
    stopped = tokens[:, 0] == 3
    index = ((tokens[~stopped] - 10 - torch.arange(FRAME) * 2) * 2 ** torch.arange(FRAME - 1, -1, -1)).sum(1)
    counts = torch.cat([torch.bincount(index, minlength=128), torch.tensor([int(stopped.sum())])])
    expected = torch.cat([full, 1 - full.sum()[None]])  # slot 0 allows its two codes and the stop token
    assert chi_square(counts, expected).p_value > 1e-3
