"""The exact distribution the losslessness tests of the Jacobi engine sample against: whole
4-token sequences of the tiny LlamaGen of `tests.decoding.helpers` (V=4, CFG 2, top-k 3)."""

from dataclasses import replace

import torch

from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.generate import generate
from mmspec.metrics.losslessness import all_sequences, sequence_counts, sequence_probs
from tests.decoding.helpers import tiny_model

EXACT_SAMPLING = SamplingConfig(guidance_scale=2.0, top_k=3)
N_SAMPLES = 40_000  # rejects a +-5% bias on sequence probabilities at p < 1e-3 (see tests/decoding/test_ar.py)


def exact_distribution():
    """The model, its layout with random token embeddings (for LANTERN and GSD) and the
    probability of every one of its 256 sequences under `EXACT_SAMPLING`."""
    model = tiny_model()
    layout = replace(model.layout(), token_embeddings=torch.randn(4, 2, generator=torch.Generator().manual_seed(0)))
    seqs = all_sequences(4, 4)
    probs = sequence_probs(model, torch.full((len(seqs),), 1), seqs, EXACT_SAMPLING)
    return model, layout, probs


def sample_counts(model, layout, config, seed):
    """How often each sequence came out of `N_SAMPLES` decodes with `config`."""
    tokens, _ = generate(
        model, torch.full((N_SAMPLES,), 1), decoding=config, sampling=EXACT_SAMPLING,
        generator=torch.Generator().manual_seed(seed), layout=layout,
    )
    return sequence_counts(tokens, 4)
