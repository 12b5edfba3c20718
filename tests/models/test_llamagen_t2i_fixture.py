"""mmspec's text-to-image LlamaGen against the original code's outputs (fixtures/llamagen_t2i).

The fixture holds the original `Transformer`'s weights (t2i, 120 caption rows, a 6 x 6 grid),
left-padded caption features and masks as its `sample_t2i.py` prepares them, and what the
original computed from them: its training forward, its KV-cached logits with CFG rows, and
the greedy tokens of its `generate()` with and without guidance.
"""

import json

import pytest
import torch

from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.generate import generate
from mmspec.models.networks.llamagen import CaptionCondition, LlamaGenConfig, LlamaGenGPT
from tests.helpers import FIXTURES

ROOT = FIXTURES / "llamagen_t2i"


@pytest.fixture(scope="module")
def fixture():
    config = json.loads((ROOT / "config.json").read_text())
    model = LlamaGenGPT.from_checkpoint(str(ROOT / "model.safetensors"), LlamaGenConfig.from_dict(config["gpt"]))
    return model, config, torch.load(ROOT / "reference.pt", weights_only=True)


def condition(ref) -> CaptionCondition:
    return CaptionCondition(ref["captions"], ref["emb_masks"])


def test_training_forward_matches_original(fixture):
    model, _, ref = fixture
    with torch.no_grad():
        logits = model(ref["tokens"], ref["captions"], ref["emb_masks"])
    torch.testing.assert_close(logits, ref["full_logits"], atol=1e-4, rtol=0)


def test_cached_logits_with_null_caption_match_original(fixture):
    """Prefill of the masked captions and of the 120-row null caption (the caption mask on
    both halves, as the original's generate() applies it), then one token per forward."""
    model, _, ref = fixture
    tokens = ref["tokens"]
    B, T = tokens.shape
    session = model.start(condition(ref), guided=True)
    first = session.prefill_logits()
    cond, uncond = [first.cond], [first.uncond]
    for t in range(T - 1):
        pos = torch.full((B, 1), t)
        out = session.forward(tokens[:, t : t + 1], pos)
        session.commit(pos, torch.ones((B, 1), dtype=torch.bool))
        cond.append(out.cond)
        uncond.append(out.uncond)
    torch.testing.assert_close(torch.cat(cond, 1), ref["cached_cond_logits"], atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.cat(uncond, 1), ref["cached_uncond_logits"], atol=1e-4, rtol=0)


@pytest.mark.parametrize("decoding", ["ar", "sjd", "mc-sjd"])
@pytest.mark.parametrize("guidance", [1.0, 4.0])
def test_greedy_tokens_match_original_generate(fixture, decoding, guidance):
    model, config, ref = fixture
    assert guidance in (1.0, config["guidance_scale"])
    sampling = SamplingConfig(guidance_scale=guidance, temperature=0.0)
    tokens, _ = generate(model, condition(ref), decoding, sampling, torch.Generator().manual_seed(0))
    assert torch.equal(tokens, ref[f"greedy_cfg{guidance:g}"])
