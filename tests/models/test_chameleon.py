"""The Chameleon adapter against Lumina-mGPT's own code: `tests/fixtures/lumina_mgpt` holds
a tiny random model, the logits of Lumina-mGPT's vendored Chameleon and the greedy tokens of
its `FlexARInferenceSolver` logits processors (see `make_fixture.py` there)."""

import json

import pytest
import torch
import transformers as tf

from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from mmspec.metrics.losslessness import all_sequences, chi_square, sequence_probs
from mmspec.models.adapters.chameleon import ChameleonCondition, ChameleonImageGenerator, load_chameleon
from tests.decoding.helpers import FickleChooser
from tests.helpers.lumina import FIXTURE, fixture_model, lumina_config, lumina_folder

EXACT = [
    "ar", "sjd", "mc-sjd",
    DecodingConfig(method="sjd", window=4, branches=2, branch_slots=2),
    DecodingConfig(method="mc-sjd", window=6, branches=3, branch_slots=3, branch_length=2),
    DecodingConfig.from_name("mc-sjd", window=3, init="above"),
]
EXACT_IDS = ["ar", "sjd", "mc-sjd", "sjd+branches", "mc-sjd+branches", "mc-sjd-above"]


@pytest.fixture(scope="module")
def reference():
    return torch.load(FIXTURE / "reference.pt", weights_only=True)


@pytest.fixture(scope="module")
def lumina():
    model = fixture_model()
    return model, ChameleonImageGenerator(model, rows=2, cols=2)


def left_padded(rows: list[torch.Tensor]) -> ChameleonCondition:
    P = max(len(r) for r in rows)
    ids = torch.ones(len(rows), P, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, P - len(row):], mask[i, P - len(row):] = row, 1
    return ChameleonCondition(ids, mask)


def test_fixture_is_small_and_loads_without_code():
    assert sum(f.stat().st_size for f in FIXTURE.iterdir()) < 2_000_000
    torch.load(FIXTURE / "reference.pt", weights_only=True)


def test_layout_forces_new_lines_and_allows_image_tokens(lumina, reference):
    model, generator = lumina
    layout = generator.layout()
    assert layout.shape == (2, 3)
    assert layout.forced.tolist() == [-1, -1, 8803, -1, -1, 8803]
    assert layout.allowed.nonzero().flatten().tolist() == list(range(4, 8196))
    assert generator.prefix == reference["image_prefix"].tolist() == [8197, 8805, 8805]
    codebook = model.model.vqmodel.quantize.embedding.weight
    torch.testing.assert_close(layout.token_embeddings[4 + 17], codebook[17].float())
    assert layout.token_embeddings[8803].eq(0).all()


@pytest.mark.parametrize("i", [0, 1])
def test_logits_match_lumina_mgpt_within_1e5(lumina, reference, i):
    """Prefill and teacher-forced cached logits, cond rows (prompt + image prefix) and
    Lumina's unconditional rows (the image prefix alone), within 1e-5 of the original."""
    _, generator = lumina
    tokens = reference[f"greedy_{i}"][None]
    session = generator.start(ChameleonCondition(reference[f"prompt_{i}"][None]), guided=True)
    first = session.prefill_logits()
    rest = session.forward(tokens, torch.arange(tokens.shape[1])[None])
    cond = torch.cat([first.cond, rest.cond], 1)[0]
    uncond = torch.cat([first.uncond, rest.uncond], 1)[0]
    assert cond.dtype == torch.float32
    torch.testing.assert_close(cond, reference[f"cond_logits_{i}"], atol=1e-5, rtol=0)
    if f"uncond_logits_{i}" in reference:  # prompt 0's only: the null rows do not see the prompt
        torch.testing.assert_close(uncond, reference[f"uncond_logits_{i}"], atol=1e-5, rtol=0)


def test_left_padded_batch_gives_the_same_logits(lumina, reference):
    _, generator = lumina
    session = generator.start(left_padded([reference["prompt_0"], reference["prompt_1"]]), guided=True)
    first = session.prefill_logits()
    for i in (0, 1):
        torch.testing.assert_close(first.cond[i, 0], reference[f"cond_logits_{i}"][0], atol=1e-5, rtol=0)
        torch.testing.assert_close(first.uncond[i, 0], reference["uncond_logits_0"][0], atol=1e-5, rtol=0)


def test_image_logits_are_masked_only_when_the_config_says_so(reference):
    """Lumina's copy masks image-token logits when `config.mask_image_logits`; upstream
    transformers' forward always does (which is why the adapter scores with `lm_head`)."""
    model = fixture_model(mask_image_logits=True)
    generator = ChameleonImageGenerator(model, rows=2, cols=2)
    prompt = reference["prompt_0"][None]
    logits = generator.start(ChameleonCondition(prompt), guided=False).prefill_logits().cond[0, 0]
    torch.testing.assert_close(logits, reference["masked_prefill_logits_0"], atol=1e-5, rtol=0)
    assert logits[4:8196].eq(torch.finfo(torch.float32).min).all()
    unmasked = fixture_model()
    ids = torch.cat([prompt, torch.tensor([generator.prefix])], 1)
    with torch.no_grad():
        upstream = unmasked(input_ids=ids).logits[0, -1]
    assert upstream[4:8196].eq(torch.finfo(upstream.dtype).min).all()
    assert not reference["cond_logits_0"][0, 4:8196].eq(torch.finfo(torch.float32).min).any()


@pytest.mark.parametrize("decoding", EXACT, ids=EXACT_IDS)
def test_greedy_tokens_are_lumina_mgpts_for_every_exact_method(lumina, reference, decoding):
    """Lumina's greedy decode (its CFG at 4.0 from the image start, row and end forcing,
    top-k 2000) and without guidance; both prompts in one left-padded batch."""
    _, generator = lumina
    condition = left_padded([reference["prompt_0"], reference["prompt_1"]])
    for scale, name in ((4.0, "greedy"), (1.0, "greedy_unguided")):
        sampling = SamplingConfig(guidance_scale=scale, temperature=0, top_k=2000)
        tokens, _ = generate(generator, condition, decoding=decoding, sampling=sampling,
                             generator=torch.Generator().manual_seed(0))
        assert tokens.tolist() == [reference[f"{name}_0"].tolist(), reference[f"{name}_1"].tolist()]


def test_sdpa_kernel_gives_the_same_greedy_tokens(reference):
    generator = ChameleonImageGenerator(fixture_model("sdpa"), rows=2, cols=2)
    condition = ChameleonCondition(reference["prompt_0"][None])
    tokens, _ = generate(generator, condition, decoding="mc-sjd", sampling=SamplingConfig(guidance_scale=4.0, temperature=0),
                         generator=torch.Generator().manual_seed(0))
    assert tokens[0].tolist() == reference["greedy_0"].tolist()


def test_image_tokens_and_sequence(lumina, reference):
    _, generator = lumina
    tokens = reference["greedy_0"][None]
    assert generator.image_tokens(tokens).tolist() == [[[671 - 4, 747 - 4], [1793 - 4, 1283 - 4]]]
    assert generator.sequence(tokens)[0].tolist() == [8197, 8805, 8805, *tokens[0].tolist(), 8196]


def test_wrong_sizes_and_styles_are_one_line_errors(lumina):
    model, _ = lumina
    with pytest.raises(ValueError, match="even"):
        ChameleonImageGenerator(model, rows=3, cols=2)
    with pytest.raises(ValueError, match="style"):
        ChameleonImageGenerator(model, rows=2, cols=2, style="emu")
    with pytest.raises(ValueError, match="lacks"):
        ChameleonImageGenerator(model, rows=2 * 40, cols=2)  # no grid token <reserved08840> in the tiny vocabulary


def test_anole_block_has_no_grid_tokens_or_new_lines(lumina, reference):
    """Anole (Chameleon's plain image block): start-of-image only, then rows x cols image
    tokens; greedy through every exact method equals AR."""
    model, _ = lumina
    generator = ChameleonImageGenerator(model, rows=2, cols=3, style="anole")
    assert generator.prefix == [8197] and generator.layout().forced is None and generator.layout_length == 6
    condition = ChameleonCondition(reference["prompt_0"][None])
    sampling = SamplingConfig(guidance_scale=3.0, temperature=0)
    ar, _ = generate(generator, condition, decoding="ar", sampling=sampling)
    assert ((ar >= 4) & (ar < 8196)).all()
    for decoding in EXACT[1:]:
        tokens, _ = generate(generator, condition, decoding=decoding, sampling=sampling, generator=torch.Generator().manual_seed(0))
        assert torch.equal(tokens, ar)


def test_load_chameleon_reads_lumina_and_transformers_5_folders(tmp_path, reference):
    model = load_chameleon(lumina_folder(tmp_path), attn_implementation="eager")
    assert model.model.layers[0].self_attn.q_norm.weight.shape == (2, 8)
    prompt = ChameleonCondition(reference["prompt_1"][None])
    logits = ChameleonImageGenerator(model, rows=2, cols=2).start(prompt, guided=False).prefill_logits().cond[0, 0]
    torch.testing.assert_close(logits, reference["cond_logits_1"][0], atol=1e-5, rtol=0)
    model.save_pretrained(tmp_path / "v5")  # transformers 5's own layout loads as is
    again = load_chameleon(tmp_path / "v5", attn_implementation="eager")
    for (name, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name


def test_load_chameleon_errors_are_one_line(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        load_chameleon(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match="not a Chameleon"):
        load_chameleon(tmp_path)


# --- losslessness on a Chameleon small enough to enumerate -------------------------------

TINY_VOCAB = {"<s>": 0, "<pad>": 1, "</s>": 2, "<reserved08799>": 3, "IMGIMGAZ": 4, "IMGIMGBZ": 5, "IMGIMGCZ": 6,
              "<racm3:break>": 7, "<eoss>": 8, "<reserved08801>": 9, "a": 10, "cat": 11}
IMAGE_IDS = torch.tensor([4, 5, 6])


def tiny_lumina() -> ChameleonImageGenerator:
    """A 2 x 2-token Lumina-style Chameleon over three image tokens: 81 images, each with
    its forced new lines. Its weights are initialised wide (std 0.1), so that the images'
    probabilities spread over two orders of magnitude and depend on the tokens before."""
    config = lumina_config(vocab_size=len(TINY_VOCAB), vocabulary_map=TINY_VOCAB, hidden_size=32, intermediate_size=64,
                           num_attention_heads=4, num_key_value_heads=2, initializer_range=0.1)
    config._attn_implementation = "eager"
    torch.manual_seed(3)
    return ChameleonImageGenerator(tf.ChameleonForConditionalGeneration(config).eval(), rows=2, cols=2)


def image_sequences() -> torch.Tensor:
    """Long `[81, 6]`: every image of `tiny_lumina`, two image tokens and a new line a row."""
    free = IMAGE_IDS[all_sequences(3, 4)].view(-1, 2, 2)
    new_lines = torch.full((len(free), 2, 1), TINY_VOCAB["<reserved08799>"])
    return torch.cat([free, new_lines], -1).flatten(1)


N_SAMPLES = 20_000  # rejects a +-7% bias on the likelier images at p < 1e-3 (see tests/decoding/test_ar.py)


@pytest.mark.statistical
@pytest.mark.parametrize("decoding", [
    DecodingConfig(method="mc-sjd", window=3, branches=2, branch_slots=2, branch_length=1),
    DecodingConfig(method="auto", branches=2, branch_slots=2, branch_length=1, chooser=FickleChooser, cost="off"),
], ids=["mc-sjd+branches", "auto-fickle"])
def test_exact_methods_sample_the_chameleon_distribution(decoding):
    """Whole images from 20,000 draws (Lumina's CFG from the image start at 3.0, top-k 2 of
    the 3 image tokens) through the Chameleon session, with tree attention and with auto,
    match the exact product of conditionals: chi-square at a fixed seed. auto's chooser here
    changes the window, branches and first drafts at every forward."""
    generator = tiny_lumina()
    prompt = torch.tensor([[0, 10, 11]])
    sampling = SamplingConfig(guidance_scale=3.0, top_k=2)
    images = image_sequences()
    probs = sequence_probs(generator, ChameleonCondition(prompt.expand(len(images), -1)), images, sampling)
    assert probs.max() > 50 * probs[probs > 0].min()  # far from uniform: a biased sampler would show
    tokens, _ = generate(generator, ChameleonCondition(prompt.expand(N_SAMPLES, -1)), decoding=decoding, sampling=sampling,
                         generator=torch.Generator().manual_seed(5))
    index = (images[None] == tokens[:, None]).all(-1).float().argmax(-1)
    assert (images[index] == tokens).all()
    result = chi_square(torch.bincount(index, minlength=len(images)), probs)
    assert result.p_value > 1e-3, result
