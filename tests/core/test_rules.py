import pytest
import torch

from mmspec.core.rules import ExactRule, GSDRule, LanternRule, PCGRule, kmeans_groups, nearest_neighbours
from mmspec.kernels.verify_reference import verify_reference
from mmspec.metrics.losslessness import chi_square


def one_slot(p, q=None):
    p = torch.tensor(p)[None, None]
    q = torch.tensor(q)[None, None] if q is not None else torch.nn.functional.one_hot(torch.tensor([[0]]), p.shape[-1]).float()
    return p, q


def test_exact_rule_is_min_one_ratio():
    p, q = one_slot([0.2, 0.8], [0.4, 0.6])
    assert torch.allclose(ExactRule().accept_prob(p, q, torch.tensor([[0]])), torch.tensor([[0.5]]))
    assert torch.allclose(ExactRule().accept_prob(p, q, torch.tensor([[1]])), torch.tensor([[1.0]]))


def test_nearest_neighbours_exclude_self_and_sort_by_distance():
    emb = torch.tensor([[0.0], [1.0], [3.0], [10.0]])
    assert nearest_neighbours(emb, 2).tolist() == [[1, 2], [0, 2], [1, 0], [2, 1]]


def test_nearest_neighbours_among_candidates_only():
    # tokens 1 and 3 are not candidates (say, text tokens with zero embeddings): never neighbours
    emb = torch.tensor([[0.0], [0.5], [3.0], [0.0], [10.0]])
    candidates = torch.tensor([True, False, True, False, True])
    assert nearest_neighbours(emb, 2, candidates).tolist() == [[2, 4], [0, 2], [0, 4], [0, 2], [2, 0]]


def test_lantern_binds_its_table_over_the_allowed_tokens():
    emb = torch.tensor([[0.0], [0.5], [1.0], [3.0]])
    p, q = one_slot([0.2, 0.0, 0.3, 0.5])
    allowed = torch.tensor([True, False, True, True])
    # over all tokens, 0's nearest is the disallowed 1 (p = 0) and k = 1 adds nothing
    assert torch.allclose(LanternRule(k=1, delta=0.5).bind(emb).accept_prob(p, q, torch.tensor([[0]])), torch.tensor([[0.2]]))
    # over the allowed ones it is 2 (p = .3); per-position masks bind their union
    for mask in (allowed, allowed.expand(3, 4)):
        assert torch.allclose(LanternRule(k=1, delta=0.5).bind(emb, mask).accept_prob(p, q, torch.tensor([[0]])), torch.tensor([[0.5]]))


def test_lantern_adds_neighbour_mass_within_delta():
    # token 0's neighbours by distance: 1 (p=.1), 2 (p=.15), 3 (p=.5)
    emb = torch.tensor([[0.0], [1.0], [2.0], [3.0]])
    p, q = one_slot([0.05, 0.1, 0.15, 0.7])
    d = torch.tensor([[0]])
    rule = LanternRule(k=3, delta=0.3).bind(emb)
    # cumulative 0.1, 0.25, 0.95: the largest within 0.3 is 0.25
    assert torch.allclose(rule.accept_prob(p, q, d), torch.tensor([[0.30]]))
    plus = LanternRule(k=3, delta=None, lam=3.0).bind(emb)  # bound (3 - 1) * 0.05 = 0.1
    assert torch.allclose(plus.accept_prob(p, q, d), torch.tensor([[0.15]]))


def test_gsd_groups_by_rank_gap_and_embedding():
    emb = torch.tensor([[0.0], [0.1], [0.2], [5.0]])
    p, q = one_slot([0.30, 0.25, 0.40, 0.05])
    d = torch.tensor([[0]])
    # group of 0: 1 (close in rank, p gap .05, near), 2 (gap .10, near); 3 is far in embedding
    assert torch.allclose(GSDRule(rank_window=7, prob_gap=0.15, embed_dist=0.5).bind(emb).accept_prob(p, q, d), torch.tensor([[0.95]]))
    # a tighter probability gap drops token 2
    assert torch.allclose(GSDRule(rank_window=7, prob_gap=0.08, embed_dist=0.5).bind(emb).accept_prob(p, q, d), torch.tensor([[0.55]]))
    # rank window 1 keeps ranks [r-1, r+1): token 2 (rank 0) and 0 itself (rank 1)
    assert torch.allclose(GSDRule(rank_window=1).bind(emb).accept_prob(p, q, d), torch.tensor([[0.70]]))


@pytest.mark.parametrize("rule", [LanternRule(k=3, delta=0.9), GSDRule(prob_gap=1.0, embed_dist=100.0), PCGRule(groups=2)],
                         ids=["lantern", "gsd", "pcg"])
def test_relaxed_rules_never_accept_a_token_outside_the_support(rule):
    emb = torch.tensor([[0.0], [1.0], [2.0], [3.0]])
    p, q = one_slot([0.0, 0.5, 0.5, 0.0])
    assert rule.bind(emb).accept_prob(p, q, torch.tensor([[0]])).item() == 0.0


@pytest.mark.parametrize("rule", [LanternRule(k=2, delta=0.3), GSDRule(rank_window=3, prob_gap=0.2, embed_dist=0.5)],
                         ids=["lantern", "gsd"])
def test_relaxed_rules_read_each_codebooks_own_table(rule):
    # steps of K = 2 codebooks (a codec's): token i of codebook k has its own vector, and each
    # token of a step is judged in its codebook alone, as with that codebook's table
    g = torch.Generator().manual_seed(0)
    books = torch.randn(2, 6, 3, generator=g)
    p = torch.softmax(torch.randn(4, 3, 2, 6, generator=g), -1)  # [N, S, K, V]
    q = torch.softmax(torch.randn(4, 3, 2, 6, generator=g), -1)
    d = torch.randint(6, (4, 3, 2), generator=g)
    both = rule.bind(books).accept_prob(p, q, d)
    for k in range(2):
        alone = rule.bind(books[k]).accept_prob(p[:, :, k], q[:, :, k], d[:, :, k])
        assert torch.allclose(both[:, :, k], alone)
    # against one shared table the answer differs: the test can tell the tables apart
    assert not torch.allclose(both[:, :, 1], rule.bind(books[0]).accept_prob(p[:, :, 1], q[:, :, 1], d[:, :, 1]))


def test_relaxed_rules_need_embeddings():
    with pytest.raises(ValueError, match="LANTERN needs token embeddings"):
        LanternRule().bind(None)
    with pytest.raises(ValueError, match="exactly one of delta"):
        LanternRule(delta=0.1, lam=2.0)


def test_rules_are_bound_once_per_table(monkeypatch):
    """LANTERN's quadratic neighbour search runs once for a codebook, however many calls
    (and freshly built layouts) use it; a different codebook is searched anew."""
    import mmspec.core.rules as rules

    calls = []
    search = rules.nearest_neighbours
    monkeypatch.setattr(rules, "nearest_neighbours", lambda *a, **k: calls.append(1) or search(*a, **k))
    codebook = torch.randn(12, 3, generator=torch.Generator().manual_seed(0))
    rule = LanternRule(k=3)
    first = rules.bind_cached(rule, codebook.clone())
    second = rules.bind_cached(rule, codebook.clone())
    assert len(calls) == 1 and torch.equal(first.neighbours, second.neighbours)
    rules.bind_cached(rule, codebook + 1)
    rules.bind_cached(LanternRule(k=4), codebook)
    assert len(calls) == 3


PAIRS = torch.tensor([[0.0], [0.1], [5.0], [5.1], [9.0], [9.1]])  # three pairs of close codes


def test_kmeans_groups_close_codes_together():
    groups = kmeans_groups(PAIRS, 3)
    assert groups[0] == groups[1] and groups[2] == groups[3] and groups[4] == groups[5] and len(set(groups.tolist())) == 3


def test_pcg_accepts_on_group_mass():
    rule = PCGRule(groups=3).bind(PAIRS)
    p, q = one_slot([0.1, 0.3, 0.2, 0.2, 0.2, 0.0], [0.3, 0.2, 0.1, 0.1, 0.1, 0.2])
    assert torch.allclose(rule.accept_prob(p, q, torch.tensor([[0]])), torch.tensor([[0.4 / 0.5]]))
    assert torch.allclose(rule.accept_prob(p, q, torch.tensor([[2]])), torch.tensor([[1.0]]))
    # q on token 5 (p = 0) does not count: group {4, 5} has P = 0.2 and Q = 0.1, not 0.3
    assert torch.allclose(rule.accept_prob(p, q, torch.tensor([[4]])), torch.tensor([[1.0]]))
    # per codebook: K = 2 tables group the codes of each codebook on its own
    two = PCGRule(groups=3).bind(torch.stack([PAIRS, PAIRS.flip(0)]))
    assert two.group_of.shape == (2, 6)


def pcg_draws(n: int, seed: int = 0):
    """One slot verified n times: a draft from q, PCG's acceptance and residual."""
    g = torch.Generator().manual_seed(seed)
    p = torch.tensor([0.05, 0.35, 0.3, 0.0, 0.1, 0.2])
    q = torch.tensor([0.3, 0.1, 0.1, 0.2, 0.25, 0.05])
    drafts = torch.multinomial(q, n, replacement=True, generator=g)
    u = lambda: torch.rand(n, 1, generator=g, dtype=torch.float64)
    out = verify_reference(p.expand(n, 1, 6).contiguous(), q.expand(n, 1, 6).contiguous(), drafts[:, None],
                           torch.ones(n, dtype=torch.long), u(), u(), rule=PCGRule(groups=3).bind(PAIRS), coupling=True)
    return out.tokens[:, 0], p


@pytest.mark.statistical
def test_pcg_is_exact_at_the_group_level_and_not_at_the_token_level():
    tokens, p = pcg_draws(40_000)
    group_of = kmeans_groups(PAIRS, 3)
    group_counts = torch.bincount(group_of[tokens], minlength=3)
    group_probs = torch.zeros(3, dtype=torch.float64).index_add_(0, group_of, p.double())
    assert chi_square(group_counts, group_probs).p_value > 1e-3
    assert (tokens == 3).sum() == 0  # p(3) = 0: never committed
    assert chi_square(torch.bincount(tokens, minlength=6), p.double()).p_value < 1e-3
