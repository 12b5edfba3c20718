"""Candidate branches at a Jacobi window's likely rejection points; exact.

When the draft at window slot j is rejected, the token x committed there is drawn from
norm((p_j - q_j)+), and every later slot of the window was computed after the wrong token:
the forward yields nothing more. Branches feed, in the same forward and under tree
attention (`CallTree`), candidates for the position of slot j beside its draft: the
tokens next to it (left, above, ... along the layout's axes; images repeat them) and the
m most likely tokens of q_j (the p that slot got in the last forward), each followed by
the window's next drafts. With steps of K tokens (the codebooks of an audio frame) a
candidate is a whole step: the steps next to it, and its draft with one codebook's token
swapped for one of that codebook's m most likely others. When x is one of them, that
candidate's outputs are p for the positions after it on committed context: the drafts
behind it are verified as a small window of their own, and the forward commits at least
one more token.

Branches are refined as the window is: every branch is verified against the p its own
nodes computed, and its next drafts (coupled, as MC-SJD's) are carried to the next forward
for as long as its token stays a candidate of that position (`BranchCarry`). So the drafts
behind a candidate follow that candidate, not the window's draft; a new candidate starts
from the window's drafts.

Near misses (steps of K tokens): when x is no candidate but some candidate agrees with x
in more of its K tokens than the rejected draft does, the window's next drafts after x
are that candidate's, with the p its nodes computed as their q. They were computed after
a step closer to x than the one the window's own drafts followed, and fit better: on the
shipped speech model this saves more forwards than the hits do.

Exact whatever the candidates: they are fixed by the past before the forward, x is drawn
as it would be without them, and a branch is read only for the p it computes after x.
Its drafts were drawn from their recorded q before any of this forward's draws, and are
verified with uniforms of their own. A near miss commits nothing of its branch: it only
chooses, by x and the candidates alone, whose next drafts the window carries, and each of
those was drawn (kept or redrawn, as MC-SJD's next drafts) with its branch's uniforms
from the p recorded as its q, so it is a draft like any other.

Names: a window's branch nodes are indexed (j, k, i): the slot j they branch at, the
candidate k, and i = 0 for the candidate itself, 1.. for the drafts that follow it. Every
node is a whole step: K tokens, the last dimension of every token tensor here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from mmspec.core.contracts import CallTree, GuidedLogits
from mmspec.core.sampling import uniforms
from mmspec.decoding.steps import allowed_steps, step_logits
from mmspec.kernels.verify import verify


@dataclass(frozen=True)
class BranchSetting:
    """Branches at the first `slots` window slots: `candidates` per slot (m; per codebook
    with K tokens a step), each followed by `length` of the window's next drafts (c)."""

    candidates: int
    slots: int
    length: int

    def __str__(self) -> str:
        return f"{self.candidates}x{self.slots}x{self.length}"


@dataclass
class BranchNodes:
    """The branch nodes of every window `[B, R, D, C, c + 1]` and where they sit in the call."""

    tokens: torch.Tensor  # long [..., K], -1 where the node is not fed
    valid: torch.Tensor  # bool
    acts_as: torch.Tensor  # long: the position the node stands for
    index: torch.Tensor  # long: the node's input index in the forward
    chain_q: torch.Tensor  # [B, R, D, C, c, K, V]: q of the drafts behind each candidate


@dataclass
class BranchCarry:
    """What a branch keeps for the next forward: its candidate `[B, R, D, C, K]` (-1 = none)
    and its next drafts `[B, R, D, C, c, K]` with their q (the p its nodes computed)."""

    tokens: torch.Tensor
    chain: torch.Tensor
    chain_q: torch.Tensor

    def slide(self, committed: torch.Tensor) -> "BranchCarry":
        """Slot j of each window `[B, R]` takes slot j + committed."""
        D = self.tokens.shape[2]
        src = torch.arange(D, device=committed.device) + committed[..., None]  # [B, R, D]
        gone = src >= D
        src = src.clamp(max=D - 1)
        take = lambda x: x.gather(2, src.view(*src.shape, *([1] * (x.dim() - 3))).expand(-1, -1, -1, *x.shape[3:]))
        return BranchCarry(take(self.tokens).masked_fill(gone[..., None, None], -1), take(self.chain), take(self.chain_q))


def check_branches(session, layout, processors) -> None:
    if not getattr(session, "supports_tree", False):
        raise ValueError(f"branches need tree attention, which {type(session).__name__} does not offer; decode with branches=0")
    if processors:
        raise ValueError("branches do not run logits processors; decode with branches=0 or without processors")


def branch_nodes(setting, window: int, layout) -> int:
    """Branch nodes of one window at most, for a `BranchSetting` (m, D, c)."""
    per_slot = setting.candidates * layout.tokens_per_step + 3 * len(layout.axes) * len(layout.axes)  # q's, then the neighbours
    return min(setting.slots, window) * per_slot * (setting.length + 1)


def neighbour_sources(layout) -> torch.Tensor:
    """Long `[T, C]`: the positions near each position that come before it in the layout,
    -1 outside it: one to three steps back along every axis, and for each pair of axes
    the six diagonals one or two steps back along the first and one or two either way
    along the second (on a grid: three to the left, three above, and above-left,
    above-right, two above and one to either side, one above and two to either side)."""
    coords, shape = layout.coords, torch.tensor(layout.shape)
    A = coords.shape[1]
    offsets = []
    for a in range(A):
        for back in (1, 2, 3):
            offsets.append(torch.zeros(A, dtype=torch.long).index_fill(0, torch.tensor(a), -back))
        for b in range(a + 1, A):
            for back, side in ((1, -1), (1, 1), (2, -1), (2, 1), (1, -2), (1, 2)):
                o = torch.zeros(A, dtype=torch.long)
                o[a], o[b] = -back, side
                offsets.append(o)
    strides = torch.cat([shape[1:].flip(0).cumprod(0).flip(0), torch.ones(1, dtype=torch.long)])
    lookup = torch.full((int(shape.prod()),), -1, dtype=torch.long)
    lookup[(coords * strides).sum(-1)] = torch.arange(layout.length)
    source = coords[:, None, :] + torch.stack(offsets)[None]  # [T, C, A]
    inside = ((source >= 0) & (source < shape)).all(-1)
    found = lookup[(source.clamp(min=0) * strides).sum(-1).clamp(max=len(lookup) - 1)]
    return torch.where(inside, found, -1)


@dataclass
class Windows:
    """What branches see of the loop's windows at one forward."""

    n: torch.Tensor  # [B, R]: each window's first undecoded position
    drafts: torch.Tensor  # [B, R, L, K], -1 = none
    q: torch.Tensor  # [B, R, L, K, V]: the q each draft was drawn from
    carried: torch.Tensor  # [B, R, L] bool: q is the p of the last forward (else one-hot, a first draft)
    tokens: torch.Tensor  # [B, T, K]
    committed: torch.Tensor  # [B, T] bool


@dataclass
class CacheMoves:
    """Cache entries to keep: written at `sources [B, n]`, they stand for `positions`."""

    sources: torch.Tensor
    positions: torch.Tensor
    mask: torch.Tensor


class Branches:
    """The exact branches of one decoding call. It owns their state (the layout's
    neighbour table, this forward's nodes, what each branch carries to the next forward);
    the loop gives it a view of its windows and, forward by forward:

    `extend` appends the nodes of a `BranchSetting` to the forward's inputs, `merge` folds
    their verification into the windows', and `commit` says which of their cache entries
    to keep. `reset` drops what they carry (the setting changed, or an AR step ran)."""

    def __init__(self, layout, sampling, rule, coupled: bool, step_groups, generator, device):
        self.layout, self.sampling, self.rule, self.coupled = layout, sampling, rule, coupled
        self.step_groups, self.generator, self.device = step_groups, generator, device
        self.sources = neighbour_sources(layout).to(device)
        self.nodes: BranchNodes | None = None  # this forward's nodes
        self.carry: BranchCarry | None = None

    def reset(self) -> None:
        self.carry = None

    def candidates(self, windows: Windows, setting: BranchSetting) -> tuple[torch.Tensor, torch.Tensor]:
        """Each leading slot's candidate steps, long `[B, R, D, C, K]` and whether each is
        one: the steps next to its position (what it sees there: committed steps or the
        window's drafts before it), then its draft with one codebook's token replaced by
        one of the m most likely others of its carried q (with K = 1, the m most likely
        tokens), without repeats, without the slot's own draft, and only steps the layout
        allows there."""
        B, R, L, K = windows.drafts.shape
        T, V = windows.tokens.shape[1], windows.q.shape[-1]
        D, m = min(setting.slots, L), setting.candidates
        draft = windows.drafts[:, :, :D]  # [B, R, D, K]
        pos = (windows.n[..., None] + torch.arange(D, device=self.device)).clamp(max=T - 1)  # [B, R, D]
        src = self.sources[pos]  # [B, R, D, C_near]
        known = torch.where(windows.committed[..., None], windows.tokens, -1)  # [B, T, K]
        near = known.gather(1, src.clamp(min=0).view(B, -1, 1).expand(-1, -1, K)).view(*src.shape, K)
        in_window = src - windows.n[..., None, None]  # the window slot of a source at or after n
        from_draft = windows.drafts.gather(2, in_window.clamp(0, L - 1).view(B, R, -1, 1).expand(-1, -1, -1, K)).view_as(near)
        near = torch.where((in_window >= 0)[..., None], from_draft, near).masked_fill((src < 0)[..., None], -1)
        q = windows.q[:, :, :D] * windows.carried[..., :D, None, None]  # one-hot first drafts offer none of their own
        mass, likely = q.scatter(-1, draft.clamp(min=0)[..., None], 0.0).topk(min(m, V), dim=-1)  # [B, R, D, K, m]
        # codebook k's alternatives [B, R, D, K, m, K]: the draft step with token k replaced
        own = torch.eye(K, dtype=torch.bool, device=self.device)[:, None, :]  # [K (swapped), 1, K]
        swapped = torch.where(own, likely[..., None], draft[..., None, None, :])
        swapped = swapped.masked_fill((mass == 0)[..., None], -1).flatten(3, 4)
        tokens = torch.cat([near, swapped], 3)  # [B, R, D, C, K]
        C = tokens.shape[3]
        earlier = torch.ones(C, C, dtype=torch.bool, device=self.device).tril(-1)
        repeat = (((tokens[..., :, None, :] == tokens[..., None, :, :]).all(-1)) & earlier).any(-1)
        ok = (tokens >= 0).all(-1) & ~repeat & (tokens != draft[..., None, :]).any(-1)
        allowed = allowed_steps(self.layout, pos)
        if allowed is not None:  # [B, R, D, K, V]: forced slots hold their token
            fits = allowed[..., None, :, :].expand(-1, -1, -1, C, -1, -1).gather(-1, tokens.clamp(min=0)[..., None])
            ok &= fits[..., 0].all(-1)
        return tokens, ok

    def extend(self, windows: Windows, live: torch.Tensor, inputs, setting: BranchSetting):
        """Appends the branch nodes of the live windows to `inputs` (the loop's packed
        inputs) under tree attention; returns the extended inputs."""
        B, R, L, K = windows.drafts.shape
        S, T, V, device = L + 1, windows.tokens.shape[1], windows.q.shape[-1], self.device
        D, c = min(setting.slots, L), setting.length
        q = windows.q
        cand, cand_ok = self.candidates(windows, setting)
        j = torch.arange(D, device=device)
        i = torch.arange(c + 1, device=device)
        # main candidate index r*S + t of every slot; input j + 1 feeds the draft of slot j
        main_fed = torch.zeros(B, R * S, dtype=torch.bool, device=device)
        main_fed.scatter_(1, inputs.take, inputs.valid)
        main_fed = main_fed.view(B, R, S)[..., 1:]  # [B, R, L]: slot's draft is fed
        follow = (j[:, None] + i[None, :]).clamp(max=L - 1)  # [D, c+1]: slot of node (j, ., i)
        fed = main_fed[:, :, follow] & ((j[:, None] + i[None, :]) < L)  # [B, R, D, c+1]
        C = cand.shape[3]  # candidates per slot
        # behind each candidate: the drafts it kept from the last forward if it was a candidate
        # there too, else the window's own drafts (stale: they followed the window's draft)
        chain = windows.drafts[:, :, follow[:, 1:]][:, :, :, None].expand(-1, -1, -1, C, -1, -1)  # [B, R, D, C, c, K]
        chain_q = q[:, :, follow[:, 1:]][:, :, :, None].expand(-1, -1, -1, C, -1, -1, -1)  # [B, R, D, C, c, K, V]
        carry = self.carry
        if carry is not None:
            same = (cand[..., :, None, :] == carry.tokens[..., None, :, :]).all(-1) & (carry.tokens >= 0).all(-1)[..., None, :]
            src = same.int().argmax(-1)  # [B, R, D, C]
            kept = carry.chain.gather(3, src[..., None, None].expand(-1, -1, -1, -1, c, K))
            use = same.any(-1)[..., None, None] & (kept >= 0).all(-1, keepdim=True)
            chain = torch.where(use, kept, chain)
            kept_q = carry.chain_q.gather(3, src[..., None, None, None].expand(-1, -1, -1, -1, c, K, V))
            chain_q = torch.where(use[..., None], kept_q, chain_q)
        tokens = torch.cat([cand[..., None, :], chain], 4)  # [B, R, D, C, c + 1, K]
        valid = live[..., None, None, None] & cand_ok[..., None] & fed[:, :, :, None, :] & (tokens >= 0).all(-1)
        valid = valid.long().cumprod(-1).bool()
        acts_as = (windows.n[..., None, None] + follow)[:, :, :, None, :].expand(B, R, D, C, c + 1)

        flat_valid = valid.reshape(B, -1)
        order = torch.argsort((~flat_valid).int(), dim=1, stable=True)
        M0, M2 = inputs.tokens.shape[1], int(flat_valid.sum(1).max())
        take = order[:, :M2]
        node_valid = flat_valid.gather(1, take)
        scratch = T + M0 + torch.arange(M2, device=device).expand(B, M2)
        node_tokens = torch.where(node_valid[..., None], tokens.reshape(B, -1, K).gather(1, take[..., None].expand(-1, -1, K)), 0)
        node_acts = torch.where(node_valid, acts_as.reshape(B, -1).gather(1, take), scratch)
        index = torch.full((B, R * D * C * (c + 1)), -1, dtype=torch.long, device=device)
        index.scatter_(1, take, torch.where(node_valid, M0 + torch.arange(M2, device=device), -1))

        # what each input sees: main inputs as without branches; a node, the main inputs of its
        # window up to slot j's input and the nodes of its own branch before it
        main_pos, main_seg = inputs.positions, inputs.segments
        mm = main_pos[:, None, :] <= main_pos[:, :, None]
        if main_seg is not None:  # several segments (None: one, as in raster order)
            mm &= main_seg[:, None, :] == main_seg[:, :, None]
        main_r, main_t = inputs.take // S, inputs.take % S  # [B, M0]
        node_id = torch.arange(R * D * C * (c + 1), device=device).view(R, D, C, c + 1)
        node_r = node_id.div(D * C * (c + 1), rounding_mode="floor").reshape(-1)
        node_j = (node_id // (C * (c + 1)) % D).reshape(-1)
        node_branch = (node_id // (c + 1)).reshape(-1)
        node_i = (node_id % (c + 1)).reshape(-1)
        nr, nj, nb, ni = (x[take] for x in (node_r, node_j, node_branch, node_i))  # [B, M2]
        bm = (main_r[:, None, :] == nr[:, :, None]) & (main_t[:, None, :] <= nj[:, :, None]) & inputs.valid[:, None, :]
        bb = (nb[:, None, :] == nb[:, :, None]) & (ni[:, None, :] <= ni[:, :, None]) & node_valid[:, None, :]
        visible = torch.cat([torch.cat([mm, torch.zeros(B, M0, M2, dtype=torch.bool, device=device)], 2),
                             torch.cat([bm, bb | torch.eye(M2, dtype=torch.bool, device=device)], 2)], 1)
        tree = CallTree(acts_as=torch.cat([main_pos, node_acts], 1), visible=visible)
        shape = (B, R, D, C, c + 1)
        self.nodes = BranchNodes(tokens.masked_fill(~valid[..., None], -1), valid, acts_as, index.view(shape), chain_q)
        return replace(inputs, tokens=torch.cat([inputs.tokens, node_tokens], 1),
                       positions=torch.cat([main_pos, scratch], 1), tree=tree)

    def merge(self, logits: GuidedLogits, out, b: torch.Tensor, r: torch.Tensor, drafts: torch.Tensor):
        """Verifies every branch as a small window of its own; where a live window's first
        rejected slot has a candidate equal to the token drawn there, that candidate's
        result extends the window's verification; where it has only a candidate nearer the
        drawn step than the draft (more of its K tokens equal), that candidate's next
        drafts replace the window's. Every branch keeps its next drafts (coupled, as the
        window's) for the next forward.

        `out` is the main verification of the live windows `(b, r)`, `drafts` their
        `[N, S, K]` drafts. Returns the merged output and the bool `[B, R, D, C, c + 1]`
        nodes whose cache entries are committed context."""
        nodes = self.nodes
        B, R, D, C, c1 = nodes.valid.shape
        c, S, K, V = c1 - 1, drafts.shape[1], drafts.shape[2], nodes.chain_q.shape[-1]
        T = self.layout.length
        rows = B * R * D * C
        accept_u = uniforms((rows, c + 1, K), self.generator, self.device)
        sample_u = uniforms((rows, c + 1, K), self.generator, self.device)
        # every branch: slot i gets p from node i and, as its draft, the token of node i + 1
        valid = nodes.valid.view(rows, c + 1)
        idx = nodes.index.view(rows, c + 1).clamp(min=0)
        seq = torch.arange(B, device=self.device).repeat_interleave(R * D * C)[:, None]
        pick = lambda t: t[seq, idx]
        predicts = (nodes.acts_as.reshape(rows, c + 1) + 1).clamp(max=T - 1)
        target = step_logits(GuidedLogits(pick(logits.cond), None if logits.uncond is None else pick(logits.uncond)),
                             predicts, self.sampling)
        num_slots = valid.sum(-1)
        has_draft = valid.roll(-1, 1)
        has_draft[:, -1] = False
        branch_drafts = torch.where(has_draft[..., None], nodes.tokens.view(rows, c + 1, K).roll(-1, 1), -1)
        branch_q = torch.cat([nodes.chain_q.reshape(rows, c, K, V), torch.zeros(rows, 1, K, V, device=self.device)], 1)
        branch_q = branch_q * has_draft[..., None, None]
        res = verify(
            None, branch_q, branch_drafts, num_slots, accept_u, sample_u,
            target_logits=target, sampling=self.sampling, allowed=allowed_steps(self.layout, predicts),
            rule=self.rule, coupling=self.coupled,
            step_groups=self.step_groups, generator=self.generator, check=False,
        )
        next_ok = valid[:, :c]  # node i - 1 computed the p that draft i follows
        self.carry = BranchCarry(
            tokens=torch.where(nodes.valid[..., 0, None], nodes.tokens[..., 0, :], -1),
            chain=torch.where(next_ok[..., None], res.tokens[:, :c], -1).view(B, R, D, C, c, K),
            chain_q=res.target_probs[:, :c].reshape(B, R, D, C, c, K, V),
        )

        keep = torch.zeros_like(nodes.valid)
        a = out.accepted
        at_a = a.clamp(max=S - 1)[:, None, None].expand(-1, 1, K)
        x, draft = out.tokens.gather(1, at_a)[:, 0], drafts.gather(1, at_a)[:, 0]  # [N, K]: at slot a
        rejected = (out.committed == a + 1) & (a < D) & (draft >= 0).all(-1)
        at = a.clamp(max=D - 1)
        agree = (nodes.tokens[b, r, at, :, 0] == x[:, None]).sum(-1)  # [N, C] codebooks equal to x
        agree = torch.where(nodes.valid[b, r, at, :, 0] & rejected[:, None], agree, -1)
        best, best_k = agree.max(-1)
        hit_mask = best == K
        use = (best > (draft == x).sum(-1)).nonzero()[:, 0]  # hits and near misses
        if len(use) == 0:
            return out, keep
        hb, hr, ha, hk = b[use], r[use], a[use], best_k[use]
        row = ((hb * R + hr) * D + ha) * C + hk
        slot = torch.arange(c + 1, device=self.device)
        follow = (ha[:, None] + 1 + slot).clamp(max=S - 1)  # the window slots the branch predicts
        write = slot[None, :] < num_slots[row][:, None]  # [H, c+1]
        tokens, probs, committed = out.tokens.clone(), out.target_probs.clone(), out.committed.clone()
        at_rows = use[:, None].expand_as(follow)[write]
        tokens[at_rows, follow[write]] = res.tokens[row][write]
        probs[at_rows, follow[write]] = res.target_probs[row][write]
        h = hit_mask[use]
        committed[use[h]] = ha[h] + 1 + res.committed[row[h]]
        keep[hb[h], hr[h], ha[h], hk[h]] = nodes.valid[hb[h], hr[h], ha[h], hk[h]] & (slot[None, :] <= res.accepted[row[h]][:, None])
        return replace(out, tokens=tokens, target_probs=probs, committed=committed), keep

    def commit(self, keep: torch.Tensor, n: torch.Tensor, committed: torch.Tensor) -> CacheMoves | None:
        """The kept nodes' cache entries (written at scratch position T + input index) that
        stand for positions now committed (before `n + committed` of their window); slides
        what the branches carry by `committed`."""
        nodes, T = self.nodes, self.layout.length
        self.carry = self.carry.slide(committed)
        keep = keep & (nodes.acts_as < (n + committed)[..., None, None, None])
        if not bool(keep.any()):
            return None
        B = keep.shape[0]
        keep, positions = keep.reshape(B, -1), nodes.acts_as.reshape(B, -1)
        return CacheMoves(torch.where(keep, T + nodes.index.reshape(B, -1), T), torch.where(keep, positions, T), keep)
