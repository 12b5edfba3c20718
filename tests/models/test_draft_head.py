"""The draft head: the hidden states a session returns, the head's cached roll-out against
its teacher-forced one, saving and binding."""

import pytest
import torch

from mmspec.models.networks.draft_head import DraftHead, DraftHeadConfig
from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT
from mmspec.pipelines.loading import save_module
from mmspec.runs.train_drafter import load_drafter, rollout_logits

T = 16


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return LlamaGenGPT(LlamaGenConfig(dim=32, n_layer=3, n_head=2, vocab_size=24, block_size=T, num_classes=4)).eval()


def sharp_head(model, layers=(-1,)):
    torch.manual_seed(1)
    head = DraftHead.for_target(model, layers)
    for p in head.parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=0.3)
    return head


def test_session_hidden_states_are_the_teacher_forced_ones(model):
    tokens = torch.randint(0, 24, (2, T), generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([1, 3])
    logits, hidden = model(tokens, labels, hidden_layers=[0, -1])
    session = model.start(labels, guided=False)
    session.hidden_layers = [0, -1]
    assert torch.allclose(session.prefill_logits().hidden[:, 0], hidden[:, 0], atol=1e-5)
    out = session.forward(tokens[:, :-1], torch.arange(T - 1).expand(2, -1))
    assert torch.allclose(out.hidden, hidden[:, 1:], atol=1e-5)
    assert torch.allclose(out.cond, logits[:, 1:], atol=1e-4)
    session.hidden_layers = None
    assert session.forward(tokens[:, :1], torch.zeros(2, 1, dtype=torch.long)).hidden is None


@pytest.mark.parametrize("layers", [(-1,), (0, 2)])
def test_cached_roll_out_matches_the_teacher_forced_one(model, layers):
    """The head's session fed true inputs up to a front, then its own features with the true
    tokens, predicts what `rollout_logits` computes for all positions at once."""
    head = sharp_head(model, layers)
    tokens = torch.randint(0, 24, (1, T), generator=torch.Generator().manual_seed(2))
    labels = torch.tensor([2])
    _, hidden = model(tokens, labels, hidden_layers=head.layers)
    features = head.fused(hidden)
    expected = rollout_logits(head, tokens, features, depth=3)
    for front in (0, 5, 11):
        cache = head.start(1, guided=False, length=T, extra_positions=4)
        pos = torch.arange(front + 1)[None]
        out, logits = cache.forward(tokens[:, :front + 1], features[:, :front + 1], pos)
        cache.commit(pos, torch.ones_like(pos, dtype=torch.bool))
        feature = out[:, -1:]
        assert torch.allclose(logits.cond[0, -1], expected[0][0, front], atol=1e-4)
        for k in (2, 3):  # step k: the true token at front + k - 1 with the last feature
            at = torch.tensor([[front + k - 1]])
            out, logits = cache.forward(tokens[:, front + k - 1:front + k], feature, at)
            cache.commit(at, torch.ones_like(at, dtype=torch.bool))
            feature = out
            assert torch.allclose(logits.cond[0, 0], expected[k - 1][0, front + k - 1], atol=1e-4), (front, k)


def test_save_load_and_binding(model, tmp_path):
    head = sharp_head(model)
    save_module(tmp_path / "drafter", head, head.config.to_dict())
    loaded = load_drafter(tmp_path / "drafter", model)
    for (name, a), (_, b) in zip(head.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
    assert not any(name.startswith("_target") for name in loaded.state_dict())
    other = LlamaGenGPT(LlamaGenConfig(dim=64, n_layer=1, n_head=2, vocab_size=24, block_size=T, num_classes=4))
    with pytest.raises(ValueError, match="dim=32"):
        loaded.bind(other)
    with pytest.raises(ValueError, match="layers"):
        DraftHeadConfig(target=model.config.to_dict(), layers=[])


def test_front_query_with_a_rejected_draft_matches_the_teacher_forced_one(model):
    """The engine's front query (written at a scratch slot, standing for the front, reading
    the rejected draft) then a roll-out step give what `rollout_logits` computes."""
    from mmspec.core.contracts import Rejected

    head = sharp_head(model)
    tokens = torch.randint(0, 24, (1, T), generator=torch.Generator().manual_seed(4))
    drafts = torch.randint(0, 24, (1, T), generator=torch.Generator().manual_seed(5))
    labels = torch.tensor([1])
    _, hidden = model(tokens, labels, hidden_layers=head.layers)
    _, stale = model(drafts, labels, hidden_layers=head.layers)  # any features stand in for the rejected ones
    features, rejected = head.fused(hidden), Rejected(drafts, head.fused(stale))
    expected = rollout_logits(head, tokens, features, depth=2, rejected=rejected)
    for front in (0, 6):
        cache = head.start(1, guided=False, length=T, extra_positions=T)
        pos = torch.arange(front + 1)[None]
        cache.forward(tokens[:, :front + 1], features[:, :front + 1], pos)
        cache.commit(pos, torch.ones_like(pos, dtype=torch.bool))
        here = Rejected(drafts[:, front:front + 1], rejected.features[:, front:front + 1])
        out, logits = cache.forward(tokens[:, front:front + 1], features[:, front:front + 1], torch.tensor([[T + 1]]),
                                    rejected=here, acts_as=torch.tensor([[front]]))
        assert torch.allclose(logits.cond[0, 0], expected[0][0, front], atol=1e-4)
        at = torch.tensor([[front + 1]])
        _, logits = cache.forward(tokens[:, front + 1:front + 2], out, at)
        assert torch.allclose(logits.cond[0, 0], expected[1][0, front + 1], atol=1e-4)
