"""The Triton verification kernel against its PyTorch reference: on CPU under
TRITON_INTERPRET=1, on the GPU when there is one (the reference always runs on CPU).

Every comparison is exact (torch.equal) for accepted counts, committed counts and tokens,
and p within 1e-6. Inputs are random with fixed seeds; the kernel's docstring says which
decisions are bit-identical by construction (ratios, CDF inversion, ties in p and in
top-k) and which only agree away from a float32 rounding of their threshold (softmax of
logits, torch's vectorized sums): at ~1e-7 per decision, these seeds never come near one.
Tiles are shrunk to 64 tokens so that V = 100 and V = 65 (BLOCK + 1) span several.
"""

import pytest
import torch

from tests.kernels.triton_mode import DEVICE  # first: sets TRITON_INTERPRET before triton is imported
import mmspec.kernels.verify_triton as vt  # noqa: E402
from mmspec.core.rules import ExactRule, GSDRule, LanternRule  # noqa: E402
from mmspec.kernels.verify import verify  # noqa: E402
from mmspec.core.sampling import SamplingConfig, transform  # noqa: E402
from mmspec.kernels.verify_reference import verify_reference  # noqa: E402

# the interpreter turns loop bounds into ints through a deprecated numpy conversion
pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")
BLOCK = 64
F64 = dict(dtype=torch.float64)


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch):
    monkeypatch.setattr(vt, "MAX_BLOCK_V", BLOCK)


def make_case(seed, N=2, S=3, V=100, top_k=0, dense=True, integer_logits=False):
    """Random windows: logits, p (their transform), q near p, drafts from q with a few -1,
    num_slots in [1, S], float64 uniforms."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(N, S, V, generator=g) * 3
    if integer_logits:  # many exact ties in logits and in p
        logits = logits.round()
    q = torch.softmax(logits + torch.randn(N, S, V, generator=g), -1)
    drafts = torch.multinomial(q.view(-1, V), 1, generator=g).view(N, S)
    drafts[torch.rand(N, S, generator=g) < 0.2] = -1
    return dict(
        logits=logits,
        target_probs=transform(logits, SamplingConfig(temperature=1.0, top_k=top_k, top_p=1.0), None),
        draft_probs=q if dense else None,
        draft_tokens=drafts,
        num_slots=torch.randint(1, S + 1, (N,), generator=g),
        accept_uniforms=torch.rand(N, S, generator=g, **F64),
        sample_uniforms=torch.rand(N, S, generator=g, **F64),
        embeddings=torch.randn(V, 8, generator=g) * 0.3,
    )


def run_both(case, rule=ExactRule(), coupling=True, from_logits=False, allowed=None, **transform):
    args = dict(draft_probs=case["draft_probs"], draft_tokens=case["draft_tokens"], num_slots=case["num_slots"],
                accept_uniforms=case["accept_uniforms"], sample_uniforms=case["sample_uniforms"], rule=rule, coupling=coupling)
    if from_logits:
        args.update(target_probs=None, target_logits=case["logits"], sampling=SamplingConfig(**transform), allowed=allowed)
    else:
        args.update(target_probs=case["target_probs"])
    on_device = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    kernel = vt.verify_triton(**on_device)
    return type(kernel)(*(None if t is None else t.cpu() for t in vars(kernel).values())), verify_reference(**args)


def assert_same(kernel, reference):
    assert torch.equal(kernel.accepted, reference.accepted), (kernel.accepted, reference.accepted)
    assert torch.equal(kernel.run_length, reference.run_length)
    assert torch.equal(kernel.tokens, reference.tokens), (kernel.tokens, reference.tokens)
    torch.testing.assert_close(kernel.target_probs, reference.target_probs, rtol=0, atol=1e-6)


def bound(rule, case):
    return rule.bind(case["embeddings"])


RULES = {
    "exact": lambda case: ExactRule(),
    "lantern-delta": lambda case: bound(LanternRule(k=12, delta=0.2), case),
    "lantern-lambda": lambda case: bound(LanternRule(k=12, delta=None, lam=3.0), case),
    "gsd": lambda case: bound(GSDRule(rank_window=3, prob_gap=0.05, embed_dist=0.6), case),
}


@pytest.mark.parametrize("dense", [True, False], ids=["dense-q", "one-hot-q"])
@pytest.mark.parametrize("coupling", [True, False], ids=["coupling", "fresh"])
@pytest.mark.parametrize("rule", list(RULES))
def test_probs_every_rule_matches_reference(rule, coupling, dense):
    case = make_case(seed=len(rule) + 2 * coupling + dense, top_k=30, dense=dense)
    kernel, reference = run_both(case, RULES[rule](case), coupling)
    assert_same(kernel, reference)


def test_probs_cover_accepts_rejects_and_window_ends():
    """The random cases are not degenerate: drafts are accepted and rejected, runs end
    inside and at the end of windows (checked on the exact rule, dense q)."""
    case = make_case(seed=3, N=6, S=4, V=BLOCK + 1)
    kernel, reference = run_both(case)
    assert_same(kernel, reference)
    assert 0 < int(kernel.accepted.sum()) < int(case["num_slots"].sum())
    assert bool((kernel.run_length == case["num_slots"]).any()) and bool((kernel.run_length < case["num_slots"]).any())


@pytest.mark.parametrize(
    "transform",
    [
        dict(),
        dict(temperature=0.7, top_k=10),
        dict(top_p=0.8),
        dict(temperature=1.3, top_k=40, top_p=0.9, allowed=True),
        dict(temperature=0.0, top_k=5, allowed=True),
    ],
    ids=["plain", "temperature-top-k", "top-p", "all-with-mask", "greedy"],
)
def test_logits_transform_matches_sampling_functions(transform):
    case = make_case(seed=11, V=BLOCK + 1)
    if transform.get("allowed"):
        transform["allowed"] = torch.rand(case["logits"].shape, generator=torch.Generator().manual_seed(5)) < 0.7
    kernel, reference = run_both(case, from_logits=True, **transform)
    assert_same(kernel, reference)


@pytest.mark.parametrize("rule", ["lantern-lambda", "gsd"])
def test_logits_with_relaxed_rules_match_reference(rule):
    case = make_case(seed=13, S=2)
    kernel, reference = run_both(case, RULES[rule](case), coupling=False, from_logits=True, top_k=20)
    assert_same(kernel, reference)


def test_single_slot_windows():
    """L = 1 (S = 1): one slot, no later drafts."""
    case = make_case(seed=17, N=4, S=1, V=BLOCK + 1)
    assert_same(*run_both(case))
    assert_same(*run_both(case, from_logits=True, top_p=0.9))


def test_ties_are_broken_as_the_reference_does():
    """Integer logits give exact ties: top-k keeps every token tied with the k-th, greedy
    takes the first arg-max, and GSD ranks tied p by token id (a group that mixes ties up
    changes p(G))."""
    case = make_case(seed=19, S=2, integer_logits=True, top_k=7)
    assert int((case["target_probs"] > 0).sum(-1).max()) > 7  # ties at the k-th were kept
    gsd = bound(GSDRule(rank_window=4, prob_gap=1.0, embed_dist=100.0), case)  # the group is the rank window
    assert_same(*run_both(case, gsd))
    assert_same(*run_both(case, from_logits=True, top_k=7))
    assert_same(*run_both(case, from_logits=True, temperature=0.0))


def test_cpu_verify_is_the_reference():
    case = make_case(seed=23)
    args = (None, None, case["draft_tokens"], case["num_slots"], case["accept_uniforms"], case["sample_uniforms"])
    public = verify(*args, target_logits=case["logits"], sampling=SamplingConfig(top_k=9))
    reference = verify_reference(*args, target_logits=case["logits"], sampling=SamplingConfig(top_k=9))
    assert_same(public, reference)
    assert torch.equal(public.target_probs, transform(case["logits"], SamplingConfig(temperature=1.0, top_k=9, top_p=1.0), None))


def base_args(N=2, S=3, V=5):
    return dict(
        target_probs=torch.full((N, S, V), 1.0 / V), draft_probs=None, draft_tokens=torch.zeros(N, S, dtype=torch.long),
        num_slots=torch.ones(N, dtype=torch.long), accept_uniforms=torch.zeros(N, S, **F64),
        sample_uniforms=torch.zeros(N, S, **F64),
    )


@pytest.mark.parametrize(
    "change,message",
    [
        (dict(target_probs=None), "exactly one of target_probs and target_logits"),
        (dict(target_logits=torch.zeros(2, 3, 5)), "exactly one of target_probs and target_logits"),
        (dict(target_probs=None, target_logits=torch.zeros(2, 3, 5, dtype=torch.float16)), "target_logits must be float32"),
        (dict(target_probs=None, target_logits=torch.zeros(2, 0, 5)), r"S = 0"),
        (dict(target_probs=None, target_logits=torch.zeros(2, 3, 5), draft_probs=torch.zeros(2, 3, 4)),
         r"draft_probs \(2, 3, 4\) must match target_logits \(2, 3, 5\)"),
        (dict(target_probs=None, target_logits=torch.zeros(2, 3, 5), allowed=torch.zeros(2, 3, 5, dtype=torch.bool)),
         "allowed must allow at least one token"),
        (dict(sampling=SamplingConfig(top_k=3)), "transform target_logits"),
        (dict(target_probs=None, target_logits=torch.zeros(2, 3, 5), sampling=dict(top_p=0.9)), "sampling must be a SamplingConfig"),
        (dict(rule=LanternRule(k=2).bind(torch.randn(6, 2))), r"LANTERN neighbour table \(6, 2\) must be \[V = 5, k\]"),
        (dict(rule=GSDRule().bind(torch.randn(4, 2))), r"GSD embedding table \(4, 2\) must be \[V = 5, E\]"),
        (dict(rule=LanternRule(k=2)), "bind"),
    ],
)
def test_bad_inputs_are_clear_errors(change, message):
    args = base_args()
    args.update(change)
    with pytest.raises(ValueError, match=message):
        verify(**args)


def test_triton_refuses_non_contiguous_tensors_before_launch():
    args = base_args()
    args["target_probs"] = torch.full((2, 5, 3), 0.2).transpose(1, 2)
    with pytest.raises(ValueError, match="target_probs must be contiguous"):
        vt.verify_triton(**args)
    args = base_args()
    args["sample_uniforms"] = torch.zeros(3, 2, **F64).t()
    with pytest.raises(ValueError, match="sample_uniforms must be contiguous"):
        vt.verify_triton(**args)


def test_triton_refuses_unknown_rules():
    class HalfRule:
        def accept_prob(self, p, q, d):
            return torch.full(d.shape, 0.5)

    with pytest.raises(ValueError, match="not HalfRule"):
        vt.verify_triton(**base_args(), rule=HalfRule())
