import pytest
import torch

from mmspec.core.rules import ExactRule
from mmspec.kernels.verify import verify
from mmspec.metrics.losslessness import chi_square

F64 = dict(dtype=torch.float64)


def test_run_stops_at_first_rejection_and_draws_from_the_residual():
    p = torch.tensor([[[0.0, 1.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]])
    q = torch.nn.functional.one_hot(torch.tensor([[1, 2, 0]]), 3).float()
    out = verify(p, q, torch.tensor([[1, 2, 0]]), torch.tensor([3]), torch.zeros(1, 3, **F64), torch.full((1, 3), 0.9, **F64))
    # slot 0: p(1)=1, accepted; slot 1: p(2)=0, rejected -> residual p minus token 2 = [.5, .5, 0]
    assert out.accepted.tolist() == [1] and out.run_length.tolist() == [2]
    assert out.tokens[0, :2].tolist() == [1, 1]


def test_run_length_is_also_readable_as_committed():
    """`VerifyOutput.committed`, the field's earlier name, reads the run lengths."""
    p = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])
    out = verify(p, None, torch.tensor([[1, 1]]), torch.tensor([2]), torch.zeros(1, 2, **F64), torch.zeros(1, 2, **F64))
    assert out.committed is out.run_length and out.run_length.tolist() == [2]


def test_slot_without_draft_is_drawn_from_p_and_window_end_commits_nothing_more():
    p = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]])
    q = p.clone()
    drafts = torch.tensor([[0, -1], [0, 1]])
    out = verify(p, q, drafts, torch.tensor([2, 2]), torch.zeros(2, 2, **F64), torch.zeros(2, 2, **F64))
    assert out.run_length.tolist() == [2, 2]
    assert out.tokens.tolist() == [[0, 1], [0, 1]]
    none = verify(p, q, torch.tensor([[0, 1], [0, 1]]), torch.tensor([2, 0]), torch.zeros(2, 2, **F64), torch.zeros(2, 2, **F64))
    assert none.run_length.tolist() == [2, 0] and none.tokens[1].tolist() == [0, 1]


@pytest.mark.statistical
@pytest.mark.parametrize("coupling", [False, True])
def test_next_drafts_have_marginal_p_and_coupling_keeps_drafts(coupling):
    """Slot 1 after a certain rejection at slot 0: its next draft must be distributed as
    p (200,000 windows, chi-square); the coupling keeps d with probability sum min(p, q)."""
    g = torch.Generator().manual_seed(0)
    N, V = 200_000, 6
    p1 = torch.tensor([0.3, 0.25, 0.2, 0.1, 0.1, 0.05])
    q1 = torch.tensor([0.05, 0.1, 0.1, 0.2, 0.25, 0.3])
    p = torch.stack([torch.tensor([0.0, 1, 0, 0, 0, 0]), p1]).expand(N, 2, V)
    q = torch.stack([torch.nn.functional.one_hot(torch.tensor(0), V).float(), q1]).expand(N, 2, V)
    d1 = torch.multinomial(q1, N, replacement=True, generator=g)
    drafts = torch.stack([torch.zeros(N, dtype=torch.long), d1], 1)
    out = verify(p, q, drafts, torch.full((N,), 2), torch.rand(N, 2, generator=g, **F64), torch.rand(N, 2, generator=g, **F64),
                 rule=ExactRule(), coupling=coupling)
    assert (out.accepted == 0).all() and (out.run_length == 1).all()
    nxt = out.tokens[:, 1]
    assert chi_square(torch.bincount(nxt, minlength=V), p1).p_value > 1e-3
    kept = (nxt == d1).double().mean().item()
    if coupling:
        assert abs(kept - torch.minimum(p1, q1).sum().item()) < 0.005
    else:
        assert abs(kept - (p1 * q1).sum().item()) < 0.005


@pytest.mark.statistical
def test_committed_token_is_distributed_as_p():
    """Draft from q, accept or resample: the committed token at slot 0 follows p."""
    g = torch.Generator().manual_seed(1)
    N, V = 200_000, 5
    p0 = torch.tensor([0.4, 0.3, 0.2, 0.1, 0.0])
    q0 = torch.tensor([0.1, 0.1, 0.1, 0.2, 0.5])
    d = torch.multinomial(q0, N, replacement=True, generator=g)
    out = verify(p0.expand(N, 1, V), q0.expand(N, 1, V), d[:, None], torch.ones(N, dtype=torch.long),
                 torch.rand(N, 1, generator=g, **F64), torch.rand(N, 1, generator=g, **F64))
    assert chi_square(torch.bincount(out.tokens[:, 0], minlength=V), p0).p_value > 1e-3


@pytest.mark.parametrize(
    "change,message",
    [
        (dict(draft_probs=torch.zeros(2, 3, 7)), r"draft_probs \(2, 3, 7\) must match target_probs \(2, 3, 5\)"),
        (dict(target_probs=torch.zeros(2, 0, 5), draft_probs=torch.zeros(2, 0, 5)), r"S = 0"),
        (dict(draft_tokens=torch.zeros(2, 4, dtype=torch.long)), r"draft_tokens must be \[2, 3\]"),
        (dict(draft_tokens=torch.full((2, 3), 5)), "draft_tokens must be < V = 5"),
        (dict(accept_uniforms=torch.zeros(2, 3)), "uniforms must be float64"),
        (dict(num_slots=torch.ones(3, dtype=torch.long)), r"num_slots must be \[2\]"),
    ],
)
def test_bad_inputs_are_clear_errors(change, message):
    args = dict(
        target_probs=torch.zeros(2, 3, 5), draft_probs=torch.zeros(2, 3, 5), draft_tokens=torch.zeros(2, 3, dtype=torch.long),
        num_slots=torch.ones(2, dtype=torch.long), accept_uniforms=torch.zeros(2, 3, **F64), sample_uniforms=torch.zeros(2, 3, **F64),
    )
    args.update(change)
    with pytest.raises(ValueError, match=message):
        verify(**args)
