"""The keyed Triton verification kernel against `verify_keyed_reference`: on CPU under
TRITON_INTERPRET=1, on the GPU when there is one (the reference always runs on CPU).

The kernel's Philox words and uniforms must equal `mmspec.core.noise` bit for bit; its
winners, accepted counts, run lengths and tokens must equal the reference's (torch.equal).
Its float64 log may differ from torch's by an ulp (checked here to stay that close), which
could move a winner only on a near-tie that these seeds do not come near. Tiles are shrunk
to 64 tokens so that V = 100 and V = 65 (BLOCK + 1) span several. The interpreter runs the
top-k and top-p bisections slowly (~0.5 s per slot), so the windows are small.
"""

import pytest
import torch

from tests.kernels.triton_mode import DEVICE  # first: sets TRITON_INTERPRET before triton is imported
import mmspec.kernels.verify_keyed_triton as vk  # noqa: E402
from mmspec.core.noise import Noise, gumbel_from_uniform, philox4x32, words_to_uniform  # noqa: E402
from mmspec.core.sampling import SamplingConfig  # noqa: E402
from mmspec.kernels.verify_keyed import verify_keyed_reference  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")
BLOCK = 64


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch):
    monkeypatch.setattr(vk, "MAX_BLOCK_V", BLOCK)


def kernel_philox(counters, keys):
    return [t.cpu() for t in vk.philox_uniforms(counters.to(DEVICE), keys.to(DEVICE))]


def test_philox_known_answer_and_torch_bits():
    """Random123's known answer for Philox4x32-10 at counter 0, key 0, then random 32-bit
    counters and keys (the top bits set included): words and uniforms bit for bit, the
    Gumbel noise within an ulp or two of float64."""
    words, _, _ = kernel_philox(torch.zeros(4, 1, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long))
    assert words[:, 0].tolist() == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    g = torch.Generator().manual_seed(0)
    M = 3000
    counters = torch.randint(0, 2**32, (4, M), generator=g)
    counters[:, :4] = torch.tensor([0, 2**32 - 1, 2**31, 1])[:, None]  # edge words
    keys = torch.randint(0, 2**32, (2, M), generator=g)
    words, uniforms, gumbels = kernel_philox(counters, keys)
    expected = philox4x32(*counters, *keys)
    for i in range(4):
        assert torch.equal(words[i], expected[i]), i
    expected_u = torch.stack([words_to_uniform(expected[0], expected[1]), words_to_uniform(expected[2], expected[3])])
    assert torch.equal(uniforms, expected_u)
    torch.testing.assert_close(gumbels, gumbel_from_uniform(expected_u), rtol=4e-15, atol=4e-15)


def test_philox_differs_with_each_input():
    """A changed counter or key word changes the words (the test above can fail)."""
    counters, keys = torch.zeros(4, 1, dtype=torch.long), torch.zeros(2, 1, dtype=torch.long)
    base = kernel_philox(counters, keys)[0]
    for j in range(4):
        c = counters.clone()
        c[j] = 1
        assert not torch.equal(kernel_philox(c, keys)[0], base)
    for j in range(2):
        k = keys.clone()
        k[j] = 1
        assert not torch.equal(kernel_philox(counters, k)[0], base)


def make_case(seed, V, K, N=2, S=3, mask=False, integer_logits=False):
    """Random logits [N, S, K, V], an allowed mask (about 60% in), rows and positions of a
    3-row batch, and num_slots in [1, S]."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(N, S, K, V, generator=g) * 3
    if integer_logits:  # exact ties
        logits = logits.round()
    allowed = torch.rand(N, S, K, V, generator=g) < 0.6 if mask else None
    return dict(
        logits=logits, allowed=allowed, noise=Noise.from_generator(g, batch_size=3),
        rows=torch.randint(0, 3, (N,), generator=g), positions=torch.randint(0, 2**20, (N, S), generator=g),
        num_slots=torch.randint(1, S + 1, (N,), generator=g), generator=g,
    )


def reference_winners(case, sampling):
    N, S, K, _ = case["logits"].shape
    out = verify_keyed_reference(case["logits"], torch.full((N, S, K), -1), torch.full((N,), S), noise=case["noise"],
                                 rows=case["rows"], positions=case["positions"], sampling=sampling, allowed=case["allowed"])
    return out.tokens


def make_drafts(case, winners):
    """Each window: the winners on a random prefix, then a wrong draft (one codebook off, or
    none), then winners or random tokens at even odds."""
    g = case["generator"]
    N, S, K, V = case["logits"].shape
    drafts = torch.where(torch.rand(N, S, 1, generator=g) < 0.5, winners, torch.randint(0, V, (N, S, K), generator=g))
    for n in range(N):
        m = int(torch.randint(0, S + 1, (), generator=g))
        drafts[n, :m] = winners[n, :m]
        if m < S:
            k = int(torch.randint(0, K, (), generator=g))
            wrong = -1 if bool(torch.rand((), generator=g) < 0.3) else (int(winners[n, m, k]) + 1) % V
            drafts[n, m, k] = wrong
    return drafts


def run_both(case, drafts, sampling, one_token=False, **override):
    """The kernel (on DEVICE) and the reference (on CPU) on the same inputs; `override`
    changes the kernel's noise, rows or positions only."""
    logits, allowed = case["logits"], case["allowed"]
    if one_token:
        logits, drafts = logits[:, :, 0], drafts[:, :, 0]
        allowed = None if allowed is None else allowed[:, :, 0]
    args = dict(noise=case["noise"], rows=case["rows"], positions=case["positions"], sampling=sampling, allowed=allowed)
    reference = verify_keyed_reference(logits, drafts, case["num_slots"], **args)
    args.update(override)
    dev = lambda t: t.to(DEVICE) if isinstance(t, torch.Tensor) else t
    kernel = vk.verify_keyed_triton(dev(logits), dev(drafts), dev(case["num_slots"]),
                                    **{k: dev(v) for k, v in args.items()})
    return kernel, reference


def assert_same(kernel, reference):
    assert kernel.target_probs is None
    assert torch.equal(kernel.accepted.cpu(), reference.accepted), (kernel.accepted, reference.accepted)
    assert torch.equal(kernel.run_length.cpu(), reference.run_length)
    assert torch.equal(kernel.tokens.cpu(), reference.tokens), (kernel.tokens, reference.tokens)


FUZZ = [  # (V, K, temperature, top_k, top_p, allowed mask)
    (100, 1, 1.0, 0, 1.0, False),
    (65, 2, 1.0, 0, 1.0, True),
    (100, 2, 0.7, 0, 1.0, False),
    (100, 1, 0.7, 5, 1.0, True),
    (65, 1, 1.0, 5, 0.8, False),
    (65, 2, 1.0, 0, 0.8, False),
    (100, 1, 0.7, 5, 0.8, True),
    (100, 2, 0.0, 5, 0.8, True),
    (65, 1, 0.0, 0, 1.0, False),
]


@pytest.mark.parametrize("V,K,temperature,top_k,top_p,mask", FUZZ,
                         ids=[f"V{v}-K{k}-t{t}-k{tk}-p{tp}{'-mask' if m else ''}" for v, k, t, tk, tp, m in FUZZ])
def test_fuzz_matches_reference(V, K, temperature, top_k, top_p, mask):
    sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
    filtered = top_k or top_p < 1  # the interpreter's bisections are slow: fewer slots
    case = make_case(seed=V + 10 * K + int(100 * temperature) + top_k + int(10 * top_p) + mask, V=V, K=K,
                     S=2 if filtered and K == 2 else 3, mask=mask)
    drafts = make_drafts(case, reference_winners(case, sampling))
    kernel, reference = run_both(case, drafts, sampling)
    assert_same(kernel, reference)
    if K == 1:  # the [N, S, V] form
        assert_same(*run_both(case, drafts, sampling, one_token=True))


def test_fuzz_covers_accepts_rejects_and_window_ends():
    """The drafts are not degenerate: runs end at 0, inside and at the end of windows."""
    sampling = SamplingConfig()
    case = make_case(seed=7, V=BLOCK + 1, K=2, N=8, S=4)
    case["num_slots"][:4] = 4
    drafts = make_drafts(case, reference_winners(case, sampling))
    kernel, reference = run_both(case, drafts, sampling)
    assert_same(kernel, reference)
    accepted, num_slots = reference.accepted, case["num_slots"]
    assert bool((accepted == 0).any()) and bool(((accepted > 0) & (accepted < num_slots)).any())
    assert bool((accepted == num_slots).any()) and bool((reference.run_length < num_slots).any())


def test_greedy_ties_go_to_the_lowest_id():
    """Integer logits tie often: temperature 0 takes the first arg-max (top-k keeps ties)."""
    case = make_case(seed=9, V=100, K=2, integer_logits=True)
    sampling = SamplingConfig(temperature=0.0, top_k=5)
    winners = reference_winners(case, sampling)
    drafts = make_drafts(case, winners)
    assert_same(*run_both(case, drafts, sampling))
    assert torch.equal(winners, case["logits"].argmax(-1))


def test_noise_follows_key_position_and_codebook():
    """The same logits under another key, other positions or another row give other
    winners (so the comparisons above can fail); at temperature 0 the key is irrelevant."""
    case = make_case(seed=11, V=100, K=2)
    sampling = SamplingConfig()
    N, S = case["positions"].shape
    drafts = reference_winners(case, sampling)
    case["num_slots"][:] = S
    kernel, reference = run_both(case, drafts, sampling)
    assert_same(kernel, reference)
    assert torch.equal(reference.accepted, torch.full((N,), S))
    other_keys = Noise(case["noise"].keys ^ 1)
    changes = [dict(noise=other_keys), dict(positions=case["positions"] + 1), dict(rows=(case["rows"] + 1) % 3)]
    for change in changes:
        moved, _ = run_both(case, drafts, sampling, **change)
        assert not torch.equal(moved.tokens.cpu(), reference.tokens), change
    swapped = case["logits"].flip(2)  # codebook 0 scored as codebook 1: different noise
    kernel = vk.verify_keyed_triton(swapped.contiguous().to(DEVICE), drafts.flip(2).to(DEVICE), case["num_slots"].to(DEVICE),
                                    noise=case["noise"], rows=case["rows"], positions=case["positions"], sampling=sampling)
    assert not torch.equal(kernel.tokens.flip(2).cpu(), reference.tokens)
    greedy = SamplingConfig(temperature=0.0)
    assert_same(*run_both(case, drafts, greedy, noise=other_keys))


def test_refuses_non_contiguous_logits():
    logits = torch.zeros(2, 5, 3).transpose(1, 2)
    with pytest.raises(ValueError, match="target_logits must be contiguous"):
        vk.verify_keyed_triton(logits, torch.zeros(2, 3, dtype=torch.long), torch.ones(2, dtype=torch.long),
                               noise=Noise(torch.zeros(2, 2, dtype=torch.long)), rows=torch.arange(2),
                               positions=torch.zeros(2, 3, dtype=torch.long))


def test_rank_scores_order_the_ranked_tokens_and_skip_padding():
    """Branch candidates read the runners-up as scores m .. 1; a -1 (a position allowing
    fewer tokens than were ranked) ranks nothing."""
    from mmspec.kernels.verify_keyed import rank_scores

    scores = rank_scores(torch.tensor([[4, 0, 2], [3, -1, -1]]), 5)
    assert scores.tolist() == [[2.0, 0.0, 1.0, 0.0, 3.0], [0.0, 0.0, 0.0, 3.0, 0.0]]
