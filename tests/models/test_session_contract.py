"""The session contract (`mmspec.core.contracts.TokenSession`), checked on every session
family: LlamaGen (c2i, t2i) and video LlamaGen (`LlamaGenSession`); Emu3, Janus and
Chameleon / Lumina-mGPT (`DecoderSession`); transformers LMs and the mesh model's OPT
(`TransformersSession`); MusicGen, K = 4 tokens a step (`MusicgenSession`). The cases and
their references (each model's own uncached forward, row by row, unpadded) are in
`tests/helpers/sessions.py`. LPD's session is a step session of its own (`LPDSession.step`);
what of the contract applies to it is at the end.

Under CFG every check covers the unconditional rows too."""

import json

import pytest
import torch

from mmspec.core.contracts import CallTree, GuidedLogits
from tests.helpers import FIXTURES
from tests.helpers.sessions import CASES


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    return CASES[request.param]()


def ones(shape) -> torch.Tensor:
    return torch.ones(shape, dtype=torch.bool)


def at(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """`x[b, positions[b, j]]` for a `[B, T, ...]` tensor and positions `[B, n]`."""
    return x[torch.arange(x.shape[0])[:, None], positions]


def pick(logits: GuidedLogits, index) -> GuidedLogits:
    """Entries `index` (along the positions axis, or `at` per row for a `[B, n]` tensor)."""
    take = (lambda x: at(x, index)) if isinstance(index, torch.Tensor) else (lambda x: x[:, index])
    return GuidedLogits(take(logits.cond), None if logits.uncond is None else take(logits.uncond))


def rows_of(logits: GuidedLogits, rows: slice) -> GuidedLogits:
    return GuidedLogits(logits.cond[rows], None if logits.uncond is None else logits.uncond[rows])


def cat(parts: list[GuidedLogits]) -> GuidedLogits:
    uncond = None if parts[0].uncond is None else torch.cat([p.uncond for p in parts], 1)
    return GuidedLogits(torch.cat([p.cond for p in parts], 1), uncond)


def assert_same_logits(out: GuidedLogits, expected: GuidedLogits, atol: float) -> None:
    torch.testing.assert_close(out.cond, expected.cond, atol=atol, rtol=0)
    assert (out.uncond is None) == (expected.uncond is None), "unconditional rows where none were asked, or none"
    if expected.uncond is not None:
        torch.testing.assert_close(out.uncond, expected.uncond, atol=atol, rtol=0)


def positions(start: int, end: int, batch: int = 2) -> torch.Tensor:
    return torch.arange(start, end).expand(batch, -1)


def committed(case, tokens, n: int, **start):
    """A session with positions `0..n-1` fed and committed."""
    session = case.start(**start)
    if n:
        pos = positions(0, n)
        session.forward(tokens[:, :n], pos)
        session.commit(pos, ones(pos.shape))
    return session


def test_prefill_then_one_token_at_a_time_equals_the_full_forward(case):
    """Without CFG rows, and with them where the family has them."""
    tokens = case.tokens()
    T = tokens.shape[1]
    for guided in sorted({False, case.guided}):
        session = case.start(guided=guided)
        assert session.batch_size == 2 and session.guided == guided
        assert hasattr(session, "prompt_tokens")
        first = session.prefill_logits()
        assert first.cond.shape[:2] == (2, 1)
        out = [first]
        for t in range(T - 1):
            pos = torch.full((2, 1), t)
            out.append(session.forward(tokens[:, t : t + 1], pos))
            session.commit(pos, ones(pos.shape))
        assert_same_logits(cat(out), case.reference([0, 1], tokens, guided), case.atol)


def test_blocks_of_several_tokens_equal_the_full_forward(case):
    tokens = case.tokens()
    T = tokens.shape[1]
    session = case.start()
    out = [session.prefill_logits()]
    for start, end in [(0, 1), (1, 4), (4, T - 1)]:
        pos = positions(start, end)
        out.append(session.forward(tokens[:, start:end], pos))
        session.commit(pos, ones(pos.shape))
    assert_same_logits(cat(out), case.reference([0, 1], tokens, case.guided), case.atol)


def test_the_inputs_of_a_call_may_come_in_any_order(case):
    """A query sees the inputs of its call at positions not after its own, wherever they
    stand in the call: a block fed back to front gives the same logits, reversed."""
    tokens = case.tokens()
    T = tokens.shape[1]
    expected = pick(case.reference([0, 1], tokens, case.guided), slice(3, T))
    order = torch.arange(T - 2, 1, -1)  # positions T-2 .. 2
    out = committed(case, tokens, 2).forward(tokens[:, order], order.expand(2, -1))
    assert_same_logits(pick(out, torch.arange(len(order) - 1, -1, -1).expand(2, -1)), expected, case.atol)


def test_forwards_over_discarded_drafts_equal_the_full_forward(case):
    """Rejected drafts leave keys in their slots: the next forward at those positions
    overwrites them, and what was never committed is never seen (Jacobi's rollback)."""
    tokens, drafts = case.tokens(seed=0), case.tokens(seed=1)
    T = tokens.shape[1]
    expected = case.reference([0, 1], tokens, case.guided)
    session = committed(case, tokens, 2)
    session.forward(drafts[:, 2:], positions(2, T))  # a window of drafts, none accepted
    out = session.forward(tokens[:, 2 : T - 1], positions(2, T - 1))
    assert_same_logits(out, pick(expected, slice(3, T)), case.atol)
    session.commit(positions(2, 4), ones((2, 2)))  # two accepted, the rest of the window dropped
    session.forward(drafts[:, 4:], positions(4, T))
    out = session.forward(tokens[:, 4 : T - 1], positions(4, T - 1))
    assert_same_logits(out, pick(expected, slice(5, T)), case.atol)


def test_uncommitted_slots_are_never_attended(case):
    """A window opened past undecoded positions (ZipAR) sees nothing of their slots,
    whatever was written there and whatever a commit masked out: the logits are
    bit-identical."""
    tokens = case.tokens()
    T = tokens.shape[1]
    outs = []
    for garbage in (None, 1, 2):
        session = committed(case, tokens, 2)
        if garbage is not None:  # written, and rejected by the commit's mask
            session.forward(case.tokens(seed=garbage)[:, 2:], positions(2, T))
            session.commit(positions(2, T), torch.zeros(2, T - 2, dtype=torch.bool))
        outs.append(session.forward(tokens[:, T - 3 : T - 1], positions(T - 3, T - 1)))
    for out in outs[1:]:
        assert_same_logits(out, outs[0], atol=0)


def test_segments_keep_the_windows_of_one_call_apart(case):
    """Two windows in one call with different segments (ZipAR's rows) equal each run alone."""
    tokens = case.tokens()
    T = tokens.shape[1]
    a, b = positions(2, 4), positions(max(4, T - 3), T - 1)
    alone = cat([committed(case, tokens, 2).forward(at(tokens, a), a), committed(case, tokens, 2).forward(at(tokens, b), b)])
    both = torch.cat([a, b], 1)
    segments = torch.cat([torch.zeros_like(a), torch.ones_like(b)], 1)
    out = committed(case, tokens, 2).forward(at(tokens, both), both, segments)
    assert_same_logits(out, alone, atol=case.atol / 10)  # one call either way: tighter than against the reference


def test_rows_advance_by_their_own_positions(case):
    """Each row commits its own number of positions and its next window starts there."""
    tokens = case.tokens()
    T = tokens.shape[1]
    expected = case.reference([0, 1], tokens, case.guided)
    lengths = torch.tensor([1, T // 2])
    n = T - T // 2 - 1
    session = case.start()
    fed = positions(0, T // 2 + 1)
    session.forward(tokens[:, : T // 2 + 1], fed)
    session.commit(fed, fed < lengths[:, None])
    pos = lengths[:, None] + torch.arange(n)
    assert_same_logits(session.forward(at(tokens, pos), pos), pick(expected, pos + 1), case.atol)


@pytest.mark.parametrize("row", [0, 1])
def test_a_row_gives_the_same_logits_alone_and_in_the_batch(case, row):
    """Rows are independent: a condition decodes alike alone (unpadded) and beside another."""
    tokens = case.tokens()
    T = tokens.shape[1]
    batch, alone = case.start([0, 1]), case.start([row])
    pos = positions(0, T - 1)
    out = cat([batch.prefill_logits(), batch.forward(tokens[:, : T - 1], pos)])
    single = cat([alone.prefill_logits(), alone.forward(tokens[row : row + 1, : T - 1], pos[:1])])
    assert_same_logits(rows_of(out, slice(row, row + 1)), single, case.atol)


@pytest.mark.parametrize("row", [0, 1])
def test_a_kept_row_continues_as_if_the_other_had_never_been_there(case, row):
    """`keep_rows` (the engine drops finished sequences from the batch): after two forwards
    of both rows, the kept row's next forwards give its logits, its own position ids and
    prompt included, and the session is then a batch of one."""
    tokens = case.tokens()
    T = tokens.shape[1]
    expected = rows_of(case.reference([0, 1], tokens, case.guided), slice(row, row + 1))
    session = committed(case, tokens, 2)
    session.keep_rows(torch.tensor([row]))
    assert session.batch_size == 1
    assert_same_logits(session.prefill_logits(), pick(expected, slice(0, 1)), case.atol)
    pos = positions(2, T - 1, batch=1)
    assert_same_logits(session.forward(tokens[row : row + 1, 2 : T - 1], pos), pick(expected, slice(3, T)), case.atol)
    session.commit(pos, ones(pos.shape))


def test_scratch_positions_past_the_end_change_nothing(case):
    """Positions past the layout's length (reserved by `extra_positions`) carry windows that
    overhang the end; the real positions of the call are unaffected."""
    tokens = case.tokens()
    T = tokens.shape[1]
    expected = case.reference([0, 1], tokens, case.guided)
    session = committed(case, tokens, 2, extra_positions=3)
    pos = positions(2, T + 3)
    padded = torch.cat([tokens[:, 2:], tokens[:, :3]], 1)  # any tokens at the scratch positions
    out = session.forward(padded, pos)
    assert_same_logits(pick(out, slice(0, T - 3)), pick(expected, slice(3, T)), case.atol)


def test_padding_at_scratch_positions_beside_early_inputs_changes_nothing(case):
    """An early call (positions 2-3) padded with inputs at scratch positions, as a batch
    whose rows feed fewer drafts is: the real inputs get their logits, although the forward
    leaves out every key past position 3 (the padding's among them)."""
    tokens = case.tokens()
    T = tokens.shape[1]
    expected = case.reference([0, 1], tokens, case.guided)
    session = committed(case, tokens, 2, extra_positions=3)
    pos = torch.tensor([2, 3, T, T + 1]).expand(2, -1)
    out = session.forward(torch.cat([tokens[:, 2:4], tokens[:, :2]], 1), pos)
    assert_same_logits(pick(out, slice(0, 2)), pick(expected, slice(3, 5)), case.atol)
    assert session.cache.key_end == session.prefix_len + 4 < session.cache.slots


# --- tree attention (sessions with supports_tree) ------------------------------------------


def tree_call(tokens, other, c: int, T: int):
    """Two candidate paths of two tokens from position c in one call: path A (`tokens`) at
    its own positions c, c+1; path B (`other`) written at the scratch positions T, T+1 and
    standing for c, c+1; each node sees its own ancestors only."""
    inputs = torch.stack([tokens[:, c], tokens[:, c + 1], other[:, c], other[:, c + 1]], 1)
    written = torch.tensor([c, c + 1, T, T + 1]).expand(2, -1)
    acts_as = torch.tensor([c, c + 1, c, c + 1]).expand(2, -1)
    visible = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]], dtype=torch.bool).expand(2, -1, -1)
    return inputs, written, CallTree(acts_as, visible)


def spliced(tokens, other, c: int) -> torch.Tensor:
    """`tokens` with path B at positions c, c+1."""
    out = tokens.clone()
    out[:, c : c + 2] = other[:, c : c + 2]
    return out


def tree_session(case, tokens, c: int):
    session = committed(case, tokens, c, extra_positions=2)
    if not getattr(session, "supports_tree", False):
        pytest.skip(f"{case.name} sessions offer no tree attention")
    return session


def test_tree_branches_give_each_path_its_logits_as_if_decoded_alone(case):
    tokens, other = case.tokens(seed=0), case.tokens(seed=1)
    T, c = tokens.shape[1], 2
    session = tree_session(case, tokens, c)
    inputs, written, tree = tree_call(tokens, other, c, T)
    out = session.forward(inputs, written, tree=tree)
    path_a = pick(case.reference([0, 1], tokens, case.guided), slice(c + 1, c + 3))
    path_b = pick(case.reference([0, 1], spliced(tokens, other, c), case.guided), slice(c + 1, c + 3))
    assert_same_logits(out, cat([path_a, path_b]), case.atol)


def test_a_relocated_branch_continues_as_if_decoded_in_place(case):
    """Path B kept: its entries move from the scratch slots to positions c, c+1 (`relocate`,
    then `commit`); the next position's logits are those of the sequence through path B."""
    tokens, other = case.tokens(seed=0), case.tokens(seed=1)
    T, c = tokens.shape[1], 2
    session = tree_session(case, tokens, c)
    inputs, written, tree = tree_call(tokens, other, c, T)
    session.forward(inputs, written, tree=tree)
    session.relocate(positions(T, T + 2), positions(c, c + 2), ones((2, 2)))
    session.commit(positions(c, c + 2), ones((2, 2)))
    sequence = spliced(tokens, other, c)
    out = session.forward(sequence[:, c + 2 : T - 1], positions(c + 2, T - 1))
    expected = pick(case.reference([0, 1], sequence, case.guided), slice(c + 3, T))
    assert_same_logits(out, expected, case.atol)


# --- LPD: a step session (feed the last group, query the next); no forward/commit ----------


@pytest.fixture(scope="module")
def lpd():
    from mmspec.models.networks.lpd import LPD, LPDConfig

    root = FIXTURES / "lpd"
    model = LPD.from_checkpoint(root / "lpd.pth", LPDConfig.from_dict(json.loads((root / "config.json").read_text())))
    return model, torch.load(root / "reference.pt", weights_only=True)


def lpd_steps(model, labels, orders, tokens, sizes, guided):
    session = model.start(labels, orders, guided=guided)
    out, previous, done = [], None, 0
    for size in sizes:
        out.append(session.step(previous, size))
        previous = tokens.gather(1, orders[:, done : done + size])
        done += size
    return cat(out)


def test_lpd_rows_give_the_same_logits_alone_and_in_the_batch_in_both_cfg_halves(lpd):
    model, ref = lpd
    sizes = ref["group_sizes"].tolist()
    batch = lpd_steps(model, ref["labels"], ref["orders"], ref["tokens"], sizes, guided=True)
    for row in range(len(ref["labels"])):
        rows = slice(row, row + 1)
        alone = lpd_steps(model, ref["labels"][rows], ref["orders"][rows], ref["tokens"][rows], sizes, guided=True)
        assert_same_logits(rows_of(batch, rows), alone, atol=1e-5)


def test_lpd_conditional_rows_are_the_same_with_and_without_cfg(lpd):
    model, ref = lpd
    sizes = ref["group_sizes"].tolist()
    guided = lpd_steps(model, ref["labels"], ref["orders"], ref["tokens"], sizes, guided=True)
    plain = lpd_steps(model, ref["labels"], ref["orders"], ref["tokens"], sizes, guided=False)
    assert plain.uncond is None
    torch.testing.assert_close(guided.cond, plain.cond, atol=1e-5, rtol=0)
