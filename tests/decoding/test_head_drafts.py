"""Learned drafts stay exact whatever the head predicts: keyed methods give AR's tokens,
SJD and MC-SJD pass the chi-square, with untrained heads."""

import pytest
import torch

from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from mmspec.metrics.losslessness import chi_square
from mmspec.models.networks.draft_head import DraftHead
from tests.decoding.helpers import FickleChooser, tiny_model
from tests.helpers import exact


def random_head(model, seed=0, layers=(-1,)):
    """An untrained head whose guesses are sharp and mostly wrong."""
    torch.manual_seed(seed)
    head = DraftHead.for_target(model, layers)
    for p in head.parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=0.5)
    return head


@pytest.fixture(scope="module")
def exact_distribution():
    return exact.exact_distribution()


@pytest.mark.statistical
@pytest.mark.parametrize("method,window,depth", [("sjd", 3, 2), ("mc-sjd", 3, 3)])
def test_sjd_and_mc_sjd_with_a_head_are_lossless(exact_distribution, method, window, depth):
    """40,000 whole sequences drawn with the head's sampled drafts and their q match the
    exact distribution (chi-square at a fixed seed)."""
    model, layout, probs = exact_distribution
    config = DecodingConfig(method=method, window=window, head=random_head(model), head_depth=depth)
    result = chi_square(exact.sample_counts(model, layout, config, seed=11), probs)
    assert result.p_value > 1e-3, result


def test_a_bad_head_is_caught_by_the_chi_square(exact_distribution, monkeypatch):
    """The test above can fail: drafts verified as if drawn from a q they were not drawn from
    (the head's sharp q reported as uniform) bias the output. (A one-hot q would not: a draft
    taken as a point mass is exact whatever it was drawn from, only accepted less often.)"""
    from mmspec.decoding.loop import head_drafts

    model, layout, probs = exact_distribution
    draw = head_drafts.HeadDrafter.draw

    def wrong_q(self, logits, positions, attempts):
        draft, q = draw(self, logits, positions, attempts)
        return draft, torch.full_like(q, 1 / q.shape[-1])

    monkeypatch.setattr(head_drafts.HeadDrafter, "draw", wrong_q)
    config = DecodingConfig(method="sjd", window=3, head=random_head(model), head_depth=2)
    assert chi_square(exact.sample_counts(model, layout, config, seed=11), probs).p_value < 1e-6


@pytest.mark.parametrize("method", ["keyed", "auto"])
@pytest.mark.parametrize("depth,layers", [(1, (-1,)), (3, (0, -1))])
def test_keyed_methods_with_a_head_give_ar_tokens(method, depth, layers):
    model = tiny_model(vocab_size=16, block_size=16, seed=3)
    model.layers.append(type(model.layers[0])(model.config))  # two layers, so that a head can fuse both
    model.config.n_layer = 2
    head = random_head(model, layers=layers)
    labels = torch.tensor([0, 1, 2])
    ar, _ = generate(model, labels, decoding="ar", generator=torch.Generator().manual_seed(5))
    for window in (2, 5):
        config = DecodingConfig(method=method, window=window, head=head, head_depth=depth, cost="off")
        tokens, stats = generate(model, labels, decoding=config, generator=torch.Generator().manual_seed(5))
        assert torch.equal(tokens, ar), (window, depth)
        assert "learned drafts" in config.describe()


def test_a_head_drafts_the_slots_after_the_front(monkeypatch):
    """The head is asked for drafts once per Jacobi forward, at the window's first slots."""
    from mmspec.decoding.loop import head_drafts

    model = tiny_model(vocab_size=16, block_size=16, seed=3)
    calls = []
    original = head_drafts.HeadDrafter.drafts

    def spy(self, tokens, front, live, current, attempts):
        calls.append((front.clone(), current.shape[1]))
        return original(self, tokens, front, live, current, attempts)

    monkeypatch.setattr(head_drafts.HeadDrafter, "drafts", spy)
    config = DecodingConfig(method="keyed", window=4, head=random_head(model), head_depth=2)
    _, stats = generate(model, torch.tensor([1]), decoding=config, generator=torch.Generator().manual_seed(0))
    assert len(calls) == stats.forward_passes - 1  # every forward but the prefill
    assert all(slots == 2 for _, slots in calls)
    fronts = [int(f[0]) for f, _ in calls]
    assert fronts == sorted(fronts) and fronts[0] == 1


def test_auto_turning_the_head_on_and_off_keeps_ar_tokens(monkeypatch):
    """A chooser that switches the head on and off between forwards: the head's cache catches
    up with what was committed while it was off, and the tokens stay AR's."""
    from mmspec.decoding.loop import head_drafts

    model = tiny_model(vocab_size=16, block_size=16, seed=3)
    caught_up = []
    original = head_drafts.HeadDrafter.drafts

    def spy(self, tokens, front, live, current, attempts):
        caught_up.append(int((front - self.fed).max()))
        return original(self, tokens, front, live, current, attempts)

    monkeypatch.setattr(head_drafts.HeadDrafter, "drafts", spy)
    labels = torch.tensor([0, 2])
    ar, _ = generate(model, labels, decoding="ar", generator=torch.Generator().manual_seed(9))
    config = DecodingConfig(method="auto", head=random_head(model), chooser=FickleChooser, cost="off")
    tokens, stats = generate(model, labels, decoding=config, generator=torch.Generator().manual_seed(9))
    assert torch.equal(tokens, ar)
    assert max(caught_up) > 1  # positions committed while the head was off are fed at once


def test_the_engine_feeds_the_head_as_it_was_trained():
    """The loop's head state, fed positions in two rounds and a draft rejected at the front,
    predicts the front as the teacher-forced training pass (`rollout_logits`) does."""
    from mmspec.core.contracts import Rejected
    from mmspec.core.noise import as_noise
    from mmspec.core.sampling import SamplingConfig
    from mmspec.decoding.loop.head_drafts import HeadDrafter
    from mmspec.runs.train_drafter import rollout_logits

    model = tiny_model(vocab_size=16, block_size=16, seed=3)
    head = random_head(model)
    tokens = torch.randint(0, 16, (2, 16), generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([0, 2])
    null = torch.full_like(labels, model.config.num_classes)
    _, hidden = model(torch.cat([tokens, tokens]), torch.cat([labels, null]), hidden_layers=head.layers)  # row t predicted t
    rejected_tokens = (tokens + 1) % 16
    _, on_rejected = model(torch.cat([rejected_tokens, rejected_tokens]), torch.cat([labels, null]), hidden_layers=head.layers)
    session = model.start(labels, guided=True)
    drafter = HeadDrafter(head, session, model.layout(), SamplingConfig(guidance_scale=2.0), as_noise(None, 2, "cpu"),
                          keyed=True, depth=1, device=torch.device("cpu"))
    expected = rollout_logits(head, torch.cat([tokens, tokens]), head.fused(hidden), 1,
                              Rejected(torch.cat([rejected_tokens, rejected_tokens]), head.fused(on_rejected)))[0]
    live = torch.ones(2, dtype=torch.bool)
    all_positions = torch.arange(16).expand(2, -1)
    drafter.record(hidden, all_positions, torch.ones(2, 16, dtype=torch.bool))
    for front in (torch.tensor([3, 5]), torch.tensor([9, 6])):
        c = front - 1
        drafter.record_rejected(on_rejected[torch.arange(4), torch.cat([c, c])], rejected_tokens[torch.arange(2), c], c,
                                torch.tensor([True, False]))
        _, logits = drafter.catch_up(tokens[..., None], front, live)
        assert torch.allclose(logits.cond[0, 0], expected[0, c[0]], atol=1e-4)  # read the rejected draft
        plain = rollout_logits(head, torch.cat([tokens, tokens]), head.fused(hidden), 1)[0]
        assert torch.allclose(logits.cond[1, 0], plain[1, c[1]], atol=1e-4)  # none rejected: the plain output
        assert torch.allclose(logits.uncond[1, 0], plain[3, c[1]], atol=1e-4)


def test_auto_drafts_with_the_head_only_where_it_pays_in_seconds():
    """The head's worth is its first drafts' hits over the carried drafts' on the same
    forwards; its measured seconds per forward are added to the forward's price."""
    from mmspec.decoding.auto.chooser import AutoContext, Choice, CostChooser
    from mmspec.decoding.auto.cost_curve import CostCurve

    model = tiny_model(vocab_size=16, block_size=16)
    curve = CostCurve([1, 5, 9, 17, 33], [1e-3 * c for c in (1.0, 1.1, 1.25, 1.5, 2.0)], rows=1)
    chooser = CostChooser(AutoContext((0, 8, 16), (None,), (None,), curve, model.layout(), head=True), model.layout(),
                          torch.device("cpu"))
    assert chooser.choose(1).head  # an optimistic prior: tried first
    for _ in range(10):  # the head hits twice as often as the carried drafts, and costs little
        chooser.observe(Choice(16, head=True), run_tokens=4 * 4.0, by_branches=0.0, forwards=4, glue_s=0.0, head_s=1e-4)
        chooser.observe_front(head_hits=4.0, carried_hits=2.0)
    assert chooser.front_hits.ratio() == pytest.approx(2.0, rel=0.2) and chooser.choose(1).head
    chooser.observe(Choice(16, head=True), run_tokens=4 * 4.0, by_branches=0.0, forwards=4, glue_s=0.0, head_s=5e-3)
    assert not chooser.choose(1).head  # the same hits, at five forwards' worth of seconds each
