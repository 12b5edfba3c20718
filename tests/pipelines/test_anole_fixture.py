"""Anole (`LuminaMGPTPipeline(style="anole")`) against LANTERN's own Anole code:
`tests/fixtures/anole` holds a tiny random Chameleon, the logits of LANTERN's
`modeling_anole_kv.ChameleonForConditionalGeneration` and the greedy tokens of its
`generate` (prompt `<s>{prompt}<reserved08706><racm3:break>`, unconditional row
`<s><racm3:break>`, CFG 3.0, image tokens only; see `make_fixture.py` there)."""

import json

import pytest
import torch

from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from mmspec.models.adapters.chameleon import ChameleonCondition, ChameleonImageGenerator
from mmspec.pipelines.lumina_mgpt import LuminaMGPTPipeline
from tests.helpers.lumina import ANOLE_FIXTURE, FIXTURE, fixture_model, tiny_tokenizer, tiny_vqgan

PROMPTS = ["a red dog according to the prompt", "a cat"]  # make_fixture.py's, in the tiny tokenizer's words
HEIGHT, WIDTH = 32, 48  # 2 x 3 image tokens of 16 pixels, the fixture's grid
EXACT = [  # windows within the 6-token image (the pipeline refuses longer ones)
    "ar", DecodingConfig.from_name("sjd", window=4), DecodingConfig.from_name("mc-sjd", window=6),
    DecodingConfig(method="sjd", window=4, branches=2, branch_slots=2),
    DecodingConfig(method="mc-sjd", window=6, branches=3, branch_slots=3, branch_length=2),
]
EXACT_IDS = ["ar", "sjd", "mc-sjd", "sjd+branches", "mc-sjd+branches"]


@pytest.fixture(scope="module")
def reference():
    return torch.load(ANOLE_FIXTURE / "reference.pt", weights_only=True)


@pytest.fixture(scope="module")
def pipe():
    pipe = LuminaMGPTPipeline(fixture_model(fixture=ANOLE_FIXTURE), tiny_tokenizer(), tiny_vqgan(), style="anole",
                              height=HEIGHT, width=WIDTH)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_fixture_is_small_and_shares_lumina_mgpts_vocabulary():
    assert sum(f.stat().st_size for f in ANOLE_FIXTURE.iterdir()) < 2_000_000
    anole, lumina = (json.loads((f / "config.json").read_text()) for f in (ANOLE_FIXTURE, FIXTURE))
    assert anole["vocabulary_map"] == lumina["vocabulary_map"]  # so tiny_tokenizer() is right for both
    assert anole["transformers_version_used"] == "4.45.2" and len(anole["lantern_commit"]) == 40


def test_prompt_and_rows_are_lanterns(pipe, reference):
    """`<s>` prompt `<reserved08706>`, then the image start; unconditional rows `<s>` and the
    image start; no grid tokens, no new lines."""
    for i, text in enumerate(PROMPTS):
        assert pipe.prompt_ids(text, HEIGHT, WIDTH) == reference[f"prompt_{i}"].tolist()
    assert reference["prompt_0"][0] == 0 and reference["prompt_0"][-1] == 8710
    generator = pipe.token_model()
    assert generator.prefix == reference["image_prefix"].tolist() == [8197]
    assert generator.unconditional_prefix == reference["unconditional_prefix"].tolist() == [0, 8197]
    assert (generator.rows, generator.cols) == tuple(reference["grid"].tolist()) == (2, 3)
    assert generator.layout().forced is None and generator.layout_length == 6


def test_defaults_are_lanterns(pipe, reference):
    defaults = pipe.default_sampling
    assert defaults["guidance_scale"] == float(reference["guidance_scale"]) == 3.0
    assert defaults["top_k"] == 2000 and defaults["temperature"] == 1.0 and defaults["top_p"] == 1.0
    with pytest.raises(ValueError, match="512x512 pixels need 1028 positions"):  # LANTERN's 32 x 32, past the tiny 256
        LuminaMGPTPipeline(pipe.model, pipe.processor, pipe.vqgan, style="anole")
    lumina = LuminaMGPTPipeline(pipe.model, pipe.processor, pipe.vqgan, height=64, width=64)
    assert lumina.default_sampling["guidance_scale"] == 4.0  # Lumina-mGPT's stays its README's


@pytest.mark.parametrize("i", [0, 1])
def test_logits_match_lanterns_within_1e5(pipe, reference, i):
    """The prefill and teacher-forced cached logits of the greedy tokens, conditional rows
    and (prompt 0) Anole's unconditional rows, within 1e-5 of what LANTERN's `generate`
    computed."""
    generator = pipe.token_model()
    tokens = reference[f"greedy_{i}"][None]
    T = tokens.shape[1]
    session = generator.start(ChameleonCondition(reference[f"prompt_{i}"][None]), guided=True)
    first = session.prefill_logits()
    rest = session.forward(tokens[:, :-1], torch.arange(T - 1)[None])
    cond = torch.cat([first.cond, rest.cond], 1)[0]
    uncond = torch.cat([first.uncond, rest.uncond], 1)[0]
    assert cond.dtype == torch.float32 and cond.shape == (T, 8832)
    torch.testing.assert_close(cond, reference[f"cond_logits_{i}"], atol=1e-5, rtol=0)
    if f"uncond_logits_{i}" in reference:
        torch.testing.assert_close(uncond, reference[f"uncond_logits_{i}"], atol=1e-5, rtol=0)


def test_left_padded_batch_gives_the_same_logits(pipe, reference):
    """Both prompts left-padded by the pipeline; the unconditional prefill does not see the
    prompt, so both rows equal prompt 0's."""
    condition = pipe.encode_condition(PROMPTS, 1, HEIGHT, WIDTH)
    first = pipe.token_model().start(condition, guided=True).prefill_logits()
    for i in (0, 1):
        torch.testing.assert_close(first.cond[i, 0], reference[f"cond_logits_{i}"][0], atol=1e-5, rtol=0)
        torch.testing.assert_close(first.uncond[i, 0], reference["uncond_logits_0"][0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("decoding", EXACT, ids=EXACT_IDS)
def test_greedy_tokens_are_lanterns_for_every_exact_method(pipe, reference, decoding):
    """LANTERN's greedy Anole decode (CFG 3.0, the pipeline's default, and without CFG),
    both prompts in one call, through the pipeline's prompt format."""
    for scale, name in ((None, "greedy"), (1.0, "greedy_unguided")):
        tokens = pipe(PROMPTS, decoding=decoding, guidance_scale=scale, temperature=0, output_type="tokens",
                      generator=torch.Generator().manual_seed(0)).images
        assert tokens.tolist() == [reference[f"{name}_0"].tolist(), reference[f"{name}_1"].tolist()], name


def test_sdpa_kernel_gives_the_same_greedy_tokens(reference):
    generator = ChameleonImageGenerator(fixture_model("sdpa", fixture=ANOLE_FIXTURE), rows=2, cols=3, style="anole")
    tokens, _ = generate(generator, ChameleonCondition(reference["prompt_1"][None]), decoding="mc-sjd",
                         sampling=SamplingConfig(guidance_scale=3.0, temperature=0), generator=torch.Generator().manual_seed(0))
    assert tokens[0].tolist() == reference["greedy_1"].tolist()
