"""The image path is unchanged: every decoding method gives, on the shipped model, the
tokens the first engine gave for the same seed (stored in
tests/fixtures/image_path/tokens_before.json, written at commit 8fe3f5e)."""

import json
from pathlib import Path

import pytest
import torch

from mmspec.pipelines.llamagen import load_default
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate

REFERENCE = json.loads((Path(__file__).parents[1] / "fixtures" / "image_path" / "tokens_before.json").read_text())


@pytest.fixture(scope="module")
def shipped():
    model = load_default()
    return model.gpt, model.gpt.layout(token_embeddings=model.vq.codebook)


@pytest.mark.parametrize("run", REFERENCE["runs"], ids=lambda r: f"{r['name']}-L{r['window']}-{r['init']}-z{r['zipar_window']}-k{r['lantern_k']}")
def test_tokens_are_bit_identical_to_the_first_engine(shipped, run):
    gpt, layout = shipped
    config = DecodingConfig.from_name(
        run["name"], window=run["window"], init=run["init"], zipar_window=run["zipar_window"] or 8,
        lantern_k=run["lantern_k"] or 1000, lantern_delta=run["lantern_delta"], lantern_lambda=run["lantern_lambda"],
    )
    tokens, stats = generate(gpt, torch.tensor(REFERENCE["class_labels"]), config,
                             SamplingConfig(guidance_scale=REFERENCE["guidance_scale"]),
                             torch.Generator().manual_seed(REFERENCE["seed"]), layout=layout)
    assert stats.forward_passes == run["forward_passes"]
    assert tokens.tolist() == run["tokens"]
