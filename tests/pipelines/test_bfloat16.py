"""Half precision on a CPU: the default call of every shipped pipeline runs in torch.bfloat16,
and there the exact methods ("keyed", and "auto", the default) return AR's tokens for each
of three seeds. Tokens may differ from float32's; they may not differ between methods.

That holds only if the logits a forward computes for a position do not depend on how many
inputs the forward carried nor how many cache slots it read: PyTorch's fused CPU attention
rounds a window's queries differently to bfloat16 than AR's single one, so the models
attend with `mmspec.models.cache.attention` in half precision on a CPU (with the fused
kernel, keyed differs from AR here for the default, video and speech models)."""

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from mmspec.models.cache.attention import invariant_attention_forward
from mmspec.pipelines import load_pipeline

SEEDS = (0, 1, 2)  # one generator per item of one call: item i is what seed i gives alone


def decode(name: str, pipe, decoding: str) -> torch.Tensor:
    """The tokens of the pipeline's call at its smallest sizes for the three seeds (tokens
    only: the codecs' outputs follow from them)."""
    generator = [torch.Generator().manual_seed(seed) for seed in SEEDS]
    if name == "default":
        return pipe(class_labels=[3, 5, 9], decoding=decoding, generator=generator, output_type="tokens").tokens
    if name == "video":
        return pipe(class_labels=[0, 2, 5], num_frames=1, decoding=decoding, generator=generator, output_type="tokens").tokens
    if name == "speech":
        return pipe(["seven", "one", "four"], duration_s=0.4, decoding=decoding, generator=generator, output_type="tokens").tokens
    if name == "mesh":
        return pipe(class_labels=[0, 3, 7], max_faces=6, decoding=decoding, generator=generator).tokens
    image = Image.new("RGB", (64, 64), (200, 30, 30))
    return pipe([image] * len(SEEDS), decoding=decoding, do_sample=True, max_new_tokens=24, generator=generator).tokens


@pytest.mark.parametrize("name", [pytest.param("default", marks=pytest.mark.slow), "video", "speech", "mesh", "captioner"])
def test_exact_methods_return_ar_tokens_in_bfloat16(name):
    pipe = load_pipeline(name, torch_dtype=torch.bfloat16)
    pipe.set_progress_bar_config(disable=True)
    assert pipe.dtype == torch.bfloat16
    ar = decode(name, pipe, "ar")
    for decoding in ("keyed", "auto"):
        tokens = decode(name, pipe, decoding)
        assert tokens.shape == ar.shape and torch.equal(tokens, ar), (decoding, (tokens != ar).nonzero()[:8].tolist())


def test_lpd_default_call_runs_in_bfloat16():
    """LPD decodes group by group ("lpd-<steps>" or "ar", no keyed method to compare)."""
    pipe = load_pipeline("lpd").to(torch.bfloat16)
    pipe.set_progress_bar_config(disable=True)
    out = pipe(4, generator=torch.Generator().manual_seed(0))
    assert pipe.transformer.dtype == torch.bfloat16
    assert out.tokens.shape == (1, pipe.sequence_length) and out.images[0].size == (64, 64)


@pytest.mark.parametrize("heads, kv_heads, head_dim", [(2, 2, 64), (6, 2, 20)])
def test_half_precision_attention_of_a_query_is_the_same_in_any_window(heads, kv_heads, head_dim):
    """A query's output, bit for bit, alone over the keys up to its own (AR) and among n
    queries over the keys up to the last one's, masked (a window); the case PyTorch's
    fused kernel fails in bfloat16."""
    torch.manual_seed(0)
    for committed in (0, 5, 250):
        for n in (3, 17):
            q = torch.randn(2, heads, n, head_dim, dtype=torch.bfloat16)
            k, v = torch.randn(2, 2, kv_heads, committed + n, head_dim, dtype=torch.bfloat16)
            seen = torch.ones(n, committed + n, dtype=torch.bool).tril(committed)[None, None]
            bias = torch.zeros(seen.shape, dtype=torch.bfloat16).masked_fill_(~seen, torch.finfo(torch.bfloat16).min)
            window = invariant_attention_forward(q, k, v, bias)
            for i in range(n):
                end = committed + i + 1
                alone = invariant_attention_forward(q[:, :, i:i + 1], k[:, :, :end], v[:, :, :end], bias[..., i:i + 1, :end])
                assert torch.equal(alone[:, :, 0], window[:, :, i]), (committed, n, i)
            reference = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=seen, enable_gqa=True)
            torch.testing.assert_close(window.double(), reference, atol=1e-2, rtol=1e-2)


def test_a_query_that_sees_no_key_gets_zeros_as_from_sdpa():
    q = torch.randn(1, 2, 2, 8, dtype=torch.bfloat16)  # [R, H, n, D]
    k, v = torch.randn(2, 1, 2, 4, 8, dtype=torch.bfloat16)
    seen = torch.tensor([[True, False, True, False], [False] * 4])[None, None]
    out = invariant_attention_forward(q, k, v, seen)
    assert torch.equal(out[0, :, 1], torch.zeros(2, 8, dtype=torch.bfloat16))
    torch.testing.assert_close(out[0, :, 0], F.scaled_dot_product_attention(q, k, v, attn_mask=seen)[0, :, 0], atol=1e-2, rtol=1e-2)
