"""Joint verification of steps of K tokens: the whole step is tested against p(x)/q(x) and
redrawn from the residual over all V^K steps; the committed step and MC-SJD's next drafts
must follow p, the test must accept exactly as often as the step distributions overlap,
and groups of one token must be the token-wise reference."""

import pytest
import torch

from mmspec.kernels.verify import verify
from mmspec.core.noise import Noise, SlotNoise
from mmspec.kernels.verify_joint import draw_residual
from mmspec.kernels.verify_reference import verify_reference
from mmspec.metrics.losslessness import chi_square

F64 = dict(dtype=torch.float64)
# two codebooks of V = 3 whose ratios p/q lean opposite ways, so that the joint test accepts
# far more often than the token-wise one (0.6 against 0.42)
P = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3]])
Q = torch.tensor([[0.2, 0.5, 0.3], [0.5, 0.3, 0.2]])


def joint(probs: torch.Tensor) -> torch.Tensor:
    """The step distribution `[V * V]` of two factors `[2, V]`."""
    return (probs[0][:, None] * probs[1][None]).flatten()


def slot_noise(N: int, S: int, seed: int = 0) -> SlotNoise:
    """Keyed noise for N windows of S slots (row i, positions 0..S-1, first attempt)."""
    positions = torch.arange(S).expand(N, S)
    return SlotNoise(Noise.from_generator(torch.Generator().manual_seed(seed), N), torch.arange(N), positions,
                     torch.zeros(N, S, dtype=torch.long))


def trials(M: int, K: int):
    """`draw_residual`'s trial uniforms for M rows of K tokens, from one slot each."""
    slots = slot_noise(M, 1)
    return lambda count, first: slots.trials(torch.ones(M, 1, dtype=torch.bool), K + 1, count, first)


def step_ids(steps: torch.Tensor) -> torch.Tensor:
    return steps[..., 0] * 3 + steps[..., 1]


@pytest.mark.statistical
def test_residual_draws_follow_the_step_residual():
    n = 100_000
    steps = draw_residual(P.expand(n, 2, 3), Q.expand(n, 2, 3), trials(n, 2))
    residual = (joint(P) - joint(Q)).clamp(min=0)
    counts = torch.bincount(step_ids(steps), minlength=9)
    assert counts[residual == 0].sum() == 0
    assert chi_square(counts[residual > 0], residual[residual > 0] / residual.sum()).p_value > 1e-3


@pytest.mark.statistical
@pytest.mark.parametrize("coupling", [True, False])
def test_committed_step_and_next_drafts_follow_p(coupling):
    """Two slots of drafts drawn from Q: the step committed at slot 0 and the next draft of
    slot 1 are distributed as P (chi-square, 200,000 windows)."""
    g = torch.Generator().manual_seed(1)
    N, S = 200_000, 2
    drafts = torch.stack([torch.multinomial(Q[k], N * S, replacement=True, generator=g).view(N, S) for k in range(2)], -1)
    out = verify(P.expand(N, S, 2, 3).contiguous(), Q.expand(N, S, 2, 3).contiguous(), drafts, torch.full((N,), S),
                 torch.rand(N, S, 2, generator=g, **F64), torch.rand(N, S, 2, generator=g, **F64),
                 coupling=coupling, step_groups=((0, 1),), residual_noise=slot_noise(N, S))
    overlap = torch.minimum(joint(P), joint(Q)).sum().item()
    assert abs((out.accepted > 0).double().mean().item() - overlap) < 0.005
    assert overlap > torch.minimum(P, Q).sum(-1).prod().item() + 0.15
    assert chi_square(torch.bincount(step_ids(out.tokens[:, 0]), minlength=9), joint(P)).p_value > 1e-3
    rejected = out.accepted == 0
    later = out.tokens[rejected, 1]
    assert chi_square(torch.bincount(step_ids(later), minlength=9), joint(P)).p_value > 1e-3
    kept = (later == drafts[rejected, 1]).all(-1).double().mean().item()
    expected = overlap if coupling else (joint(P) * joint(Q)).sum().item()
    assert abs(kept - expected) < 0.01


def test_one_codebook_pays_for_another():
    """Codebook 0's draft is twice as likely under p as under q, codebook 1's 0.6 times:
    the step's ratio is 1.2 and it is accepted whatever the uniform; token by token, a
    uniform of 0.9 rejects codebook 1."""
    p = torch.tensor([[0.5, 0.5], [0.6, 0.4]])[None, None]
    q = torch.tensor([[0.25, 0.75], [1.0, 0.0]])[None, None]
    drafts = torch.tensor([[[0, 0]]])
    u = torch.full((1, 1, 2), 0.9, **F64)
    args = (p, q, drafts, torch.tensor([1]), u, u)
    assert verify(*args, step_groups=((0, 1),), residual_noise=slot_noise(1, 1)).accepted.tolist() == [1]
    assert verify(*args).accepted.tolist() == [0]


def test_equal_distributions_accept_and_forced_tokens_stay():
    """p == q accepts every draft; a residual that differs only in rounding is drawn from p,
    and a codebook forced to one token (one-hot p and q) keeps it."""
    p = torch.tensor([[0.3, 0.7], [1.0, 0.0]])
    drafts = torch.tensor([[[1, 0], [0, 0]]])
    u = torch.full((1, 2, 2), 0.999, **F64)
    out = verify(p.expand(1, 2, 2, 2), p.expand(1, 2, 2, 2), drafts, torch.tensor([2]), u, u, step_groups=((0, 1),), residual_noise=slot_noise(1, 2))
    assert out.accepted.tolist() == [2]
    close = draw_residual(p.expand(500, 2, 2), (p + 1e-8).expand(500, 2, 2), trials(500, 2))
    assert (close[:, 1] == 0).all() and set(close[:, 0].tolist()) == {0, 1}


@pytest.mark.parametrize("coupling", [True, False])
def test_groups_of_one_token_are_the_token_wise_reference(coupling):
    """Random windows (some slots without a draft or a p): one group per codebook gives
    the reference's result bit for bit."""
    g = torch.Generator().manual_seed(2)
    N, S, K, V = 64, 5, 3, 7
    p = torch.randn(N, S, K, V, generator=g).softmax(-1)
    q = torch.randn(N, S, K, V, generator=g).softmax(-1)
    drafts = torch.randint(V, (N, S, K), generator=g).masked_fill(torch.rand(N, S, 1, generator=g) < 0.2, -1)
    args = (p, q, drafts, torch.randint(S + 1, (N,), generator=g), torch.rand(N, S, K, generator=g, **F64),
            torch.rand(N, S, K, generator=g, **F64))
    ours = verify(*args, coupling=coupling, step_groups=((0,), (1,), (2,)), residual_noise=slot_noise(N, S))
    ref = verify_reference(*args, coupling=coupling)
    assert torch.equal(ours.accepted, ref.accepted) and torch.equal(ours.run_length, ref.run_length)
    assert torch.equal(ours.tokens, ref.tokens)
