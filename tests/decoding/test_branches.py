import pytest
import torch

from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.branches.setting import check_branches
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from mmspec.decoding.loop.jacobi import decode_jacobi, extra_positions
from mmspec.metrics.losslessness import chi_square
from tests.decoding.helpers import record_massless_drafts, tiny_model
from tests.helpers import exact
from tests.helpers.layouts import eol_layout
from tests.helpers.sessions import cache_rows_as_they_leave

SAMPLING = SamplingConfig(guidance_scale=2.0, top_k=8)


@pytest.fixture(scope="module")
def exact_distribution():
    return exact.exact_distribution()


@pytest.mark.statistical
@pytest.mark.parametrize(
    "config",
    [
        DecodingConfig(method="mc-sjd", window=3, branches=2, branch_slots=2, branch_length=1),
        DecodingConfig(method="sjd", window=3, init="above", branches=1, branch_slots=3, branch_length=2),
        DecodingConfig(method="mc-sjd", window=2, branches=3, branch_slots=1, branch_length=0),
    ],
    ids=lambda c: f"{c.name}-L{c.window}-{c.branches}x{c.branch_slots}-len{c.branch_length}",
)
def test_branches_are_lossless(exact_distribution, config):
    """Whole 4-token sequences (V=4, CFG 2, top-k 3) from 40,000 draws with branches match
    the exact product of conditionals: chi-square at a fixed seed."""
    model, layout, probs = exact_distribution
    result = chi_square(exact.sample_counts(model, layout, config, seed=11), probs)
    assert result.p_value > 1e-3, result


def decode_counting_relocations(model, labels, config, seed=0, sampling=SAMPLING):
    """Decodes with `config` and returns tokens, stats, the session and how many cache
    entries branches moved into place."""
    layout = model.layout()
    session = model.start(labels, guided=True, extra_positions=extra_positions(layout, config, torch.device("cpu")))
    moved = []
    relocate = session.relocate
    session.relocate = lambda src, pos, mask: (moved.append(int(mask.sum())), relocate(src, pos, mask))
    tokens, stats = decode_jacobi(session, layout, sampling, config, torch.Generator().manual_seed(seed))
    return tokens, stats, session, sum(moved)


def test_branches_take_hits_and_need_fewer_forwards():
    """Fixed seeds: branches commit extra tokens, and sequences need fewer forwards."""
    model = tiny_model(vocab_size=16, block_size=16)
    labels = torch.arange(3).repeat(22)
    sampling = SamplingConfig(guidance_scale=2.0, top_k=4)
    plain = DecodingConfig(method="mc-sjd", window=6)
    branched = DecodingConfig(method="mc-sjd", window=6, branches=3, branch_slots=3, branch_length=2)
    _, base, _, _ = decode_counting_relocations(model, labels, plain, sampling=sampling)
    _, stats, _, moved = decode_counting_relocations(model, labels, branched, sampling=sampling)
    assert moved > 50
    assert stats.forward_passes_per_sample.float().mean() < 0.97 * base.forward_passes_per_sample.float().mean()


def test_branch_cache_entries_end_where_a_teacher_forced_pass_puts_them():
    """Kept branch nodes are computed at scratch slots and moved into place: the committed
    cache of every sequence, when it leaves the batch and at the end, equals a plain pass
    over the decoded tokens (the cond rows, then the uncond rows, of each sequence)."""
    model = tiny_model(vocab_size=16, block_size=16)
    labels = torch.tensor([0, 1, 2, 1])
    config = DecodingConfig(method="mc-sjd", window=6, branches=4, branch_slots=3, branch_length=2)
    layout = model.layout()
    session = model.start(labels, guided=True, extra_positions=extra_positions(layout, config, torch.device("cpu")))
    rows = cache_rows_as_they_leave(session)
    moved, relocate = [], session.relocate
    session.relocate = lambda src, pos, mask: (moved.append(int(mask.sum())), relocate(src, pos, mask))
    tokens, _ = decode_jacobi(session, layout, SAMPLING, config, torch.Generator().manual_seed(3))
    assert sum(moved) > 0
    committed, k, v = rows()
    reference = model.start(labels, guided=True)
    T = tokens.shape[1]
    reference.forward(tokens[:, : T - 1], torch.arange(T - 1).expand(len(labels), -1))
    P = model.config.cls_token_num
    assert committed[:, P : P + T - 1].all()
    order = torch.stack([torch.arange(len(labels)), torch.arange(len(labels)) + len(labels)], 1).flatten()  # seq 0 cond, uncond, ...
    for kv, ref in ((k, reference.cache.k), (v, reference.cache.v)):
        torch.testing.assert_close(kv[..., P : P + T - 1, :], ref[:, order].movedim(1, 0)[..., P : P + T - 1, :])


def test_greedy_with_branches_reproduces_ar():
    model = tiny_model(vocab_size=16, block_size=16)
    sampling = SamplingConfig(guidance_scale=3.0, temperature=0)
    labels = torch.tensor([0, 1, 2])
    ar, _ = generate(model, labels, decoding="ar", sampling=sampling)
    config = DecodingConfig(method="mc-sjd", window=5, branches=3, branch_slots=2)
    tokens, _ = generate(model, labels, decoding=config, sampling=sampling, generator=torch.Generator().manual_seed(0))
    assert torch.equal(tokens, ar)


def test_branches_compose_with_zipar_and_forced_tokens():
    model = tiny_model(vocab_size=16, block_size=16)
    config = DecodingConfig.from_name("zipar+mc-sjd", window=5, zipar_window=2, branches=3, branch_slots=2)
    tokens, _ = generate(model, torch.tensor([0, 1, 2, 0]), decoding=config, sampling=SamplingConfig(top_k=8),
                         layout=eol_layout(), generator=torch.Generator().manual_seed(0))
    grid = tokens.view(4, 4, 4)
    assert (grid[..., 3] == 15).all() and (grid[..., :3] != 15).all()


def test_branch_errors_are_one_line():
    with pytest.raises(ValueError, match="tree attention"):
        check_branches(object())
    with pytest.raises(ValueError, match="sjd or mc-sjd"):
        DecodingConfig(method="ar", branches=2)
    with pytest.raises(ValueError, match="branch_length"):
        DecodingConfig(branches=2, branch_length=-1)
    with pytest.raises(ValueError, match="branches must be an integer"):
        DecodingConfig(branches=-2)


def test_neighbour_candidates_on_a_grid():
    """Above 1-3, the six diagonals, left 1-3; -1 off the grid."""
    from mmspec.core.layout import TokenLayout
    from mmspec.decoding.branches.candidates import neighbour_sources

    sources = neighbour_sources(TokenLayout.grid((4, 4), 8))
    assert sources[5].tolist() == [1, -1, -1, 0, 2, -1, -1, -1, 3, 4, -1, -1]
    assert sources[15].tolist() == [11, 7, 3, 10, -1, 6, -1, 9, -1, 14, 13, 12]
    assert (sources[0] == -1).all()


def test_branch_carry_slides_with_the_window():
    from mmspec.decoding.branches.tree import BranchCarry

    tokens = torch.arange(6).view(1, 1, 3, 2, 1)  # [B, R, D=3, C=2, K=1]
    carry = BranchCarry(tokens, tokens[..., None, :] + 10, tokens[..., None, :, None].float().expand(-1, -1, -1, -1, 1, 1, 4))
    slid = carry.slide(torch.tensor([[1]]))
    assert slid.tokens[..., 0].tolist() == [[[[2, 3], [4, 5], [-1, -1]]]]
    assert slid.chain[0, 0, :2, :, 0, 0].tolist() == [[12, 13], [14, 15]]
    assert slid.chain_q[0, 0, 1, 1, 0, 0].tolist() == [5.0] * 4


def test_every_branch_draft_is_verified_against_the_q_it_was_drawn_from(monkeypatch):
    """Top-k 4 of 16 tokens gives every q its own support: a draft a branch kept from the
    last forward and verified against another q (the window's) would often have no mass
    there. Fixed seeds: every drafted branch slot's draft has mass under its q, over
    enough branch drafts that kept chains are among them."""
    from mmspec.decoding.branches import tree

    model = tiny_model(vocab_size=16, block_size=16)
    checked = record_massless_drafts(monkeypatch, tree)
    config = DecodingConfig(method="mc-sjd", window=6, branches=3, branch_slots=3, branch_length=2)
    decode_counting_relocations(model, torch.arange(3).repeat(8), config, sampling=SamplingConfig(guidance_scale=2.0, top_k=4))
    drafted, massless = map(sum, zip(*checked))
    assert drafted > 2000 and massless == 0

