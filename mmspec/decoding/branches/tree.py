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

Names: a window's branch nodes are indexed (j, cand, i): the slot j they branch at, the
candidate cand, and i = 0 for the candidate itself, 1.. for the drafts that follow it. Every
node is a whole step: K tokens, the last dimension of every token tensor here. A run length
is the slots one verification commits (`VerifyOutput.run_length`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from mmspec.core.contracts import CallTree, GuidedLogits
from mmspec.core.device import DeviceProfile
from mmspec.core.noise import Noise, SlotNoise
from mmspec.decoding.branches.candidates import Windows, branch_candidates, neighbour_sources
from mmspec.decoding.branches.setting import BranchSetting
from mmspec.decoding.steps import allowed_steps, step_logits
from mmspec.kernels.verify import verify, verify_keyed
from mmspec.kernels.verify_keyed import rank_scores


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

    def slide(self, run_length: torch.Tensor) -> "BranchCarry":
        """Slot j of each window `[B, R]` takes slot j + its run length."""
        D = self.tokens.shape[2]
        src = torch.arange(D, device=run_length.device) + run_length[..., None]  # [B, R, D]
        gone = src >= D
        src = src.clamp(max=D - 1)
        take = lambda x: x.gather(2, src.view(*src.shape, *([1] * (x.dim() - 3))).expand(-1, -1, -1, *x.shape[3:]))
        return BranchCarry(take(self.tokens).masked_fill(gone[..., None, None], -1), take(self.chain), take(self.chain_q))


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

    def __init__(self, layout, sampling, rule, coupled: bool, step_groups, noise: Noise, attempts: torch.Tensor, keyed: bool,
                 profile: DeviceProfile, processors=()):
        self.layout, self.sampling, self.rule, self.coupled = layout, sampling, rule, coupled
        self.processors = processors  # history-dependent: a node sees its window's drafts before it, then its branch
        self.step_groups, self.profile = step_groups, profile
        self.device = device = profile.device
        # keyed: each node's winner under the row's noise; else SJD / MC-SJD uniforms keyed by
        # the position a node predicts and its attempt (`attempts [B, T + 1]`, the loop's)
        self.noise, self.attempts, self.keyed = noise, attempts, keyed
        self.sources = neighbour_sources(layout).to(device)
        self.nodes: BranchNodes | None = None  # this forward's nodes
        self.carry: BranchCarry | None = None

    def reset(self) -> None:
        self.carry = None

    def extend(self, windows: Windows, live: torch.Tensor, inputs, setting: BranchSetting):
        """Appends the branch nodes of the live windows to `inputs` (the loop's packed
        inputs) under tree attention; returns the extended inputs."""
        B, R, L, K = windows.drafts.shape
        S, T, V, device = L + 1, windows.tokens.shape[1], windows.q.shape[-1], self.device
        self.ranked = setting.candidates + 1  # keyed: the winner and the runners-up next forwards' candidates take
        D, c = min(setting.slots, L), setting.length
        q = windows.q
        cand, cand_ok = branch_candidates(windows, setting, self.sources, self.layout)
        j = torch.arange(D, device=device)
        i = torch.arange(c + 1, device=device)
        # window input index r*S + t of every slot; window input j + 1 feeds the draft of slot j
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

    def merge(self, logits: GuidedLogits, out, b: torch.Tensor, r: torch.Tensor, drafts: torch.Tensor, prompt=None,
              window_history=None):
        """Verifies every branch as a small window of its own; where a live window's first
        rejected slot has a candidate equal to the token drawn there, that candidate's
        result extends the window's verification; where it has only a candidate nearer the
        drawn step than the draft (more of its K tokens equal), that candidate's next
        drafts replace the window's. Every branch keeps its next drafts (coupled, as the
        window's) for the next forward.

        `out` is the main verification of the live windows `(b, r)`, `drafts` their
        `[N, S, K]` drafts; with processors, `prompt [B, P, K]` and `window_history(b, r)`
        (what each window slot has seen) give each node's history. Returns the merged output
        and the bool `[B, R, D, C, c + 1]` nodes whose cache entries are committed context."""
        nodes = self.nodes
        B, R, D, C, c1 = nodes.valid.shape
        c, S, K, V = c1 - 1, drafts.shape[1], drafts.shape[2], nodes.chain_q.shape[-1]
        T = self.layout.length
        rows = B * R * D * C
        # every branch: slot i gets p from node i and, as its draft, the token of node i + 1
        valid = nodes.valid.view(rows, c + 1)
        idx = nodes.index.view(rows, c + 1).clamp(min=0)
        seq = torch.arange(B, device=self.device).repeat_interleave(R * D * C)[:, None]
        pick = lambda t: t[seq, idx]
        predicts = (nodes.acts_as.reshape(rows, c + 1) + 1).clamp(max=T - 1)
        history = self.node_history(window_history) if self.processors else None
        target = step_logits(GuidedLogits(pick(logits.cond), None if logits.uncond is None else pick(logits.uncond)),
                             predicts, self.sampling, self.processors, None if prompt is None else prompt[seq[:, 0]], history)
        num_slots = valid.sum(-1)
        has_draft = valid.roll(-1, 1)
        has_draft[:, -1] = False
        branch_drafts = torch.where(has_draft[..., None], nodes.tokens.view(rows, c + 1, K).roll(-1, 1), -1)
        allowed = allowed_steps(self.layout, predicts)
        if self.keyed:
            res = verify_keyed(target, branch_drafts, num_slots, noise=self.noise, rows=seq[:, 0], positions=predicts,
                               sampling=self.sampling, allowed=allowed, ranked=self.ranked, check=False, profile=self.profile)
            res.target_probs = rank_scores(res.ranked, V)
        else:
            branch_q = torch.cat([nodes.chain_q.reshape(rows, c, K, V), torch.zeros(rows, 1, K, V, device=self.device)], 1)
            branch_q = branch_q * has_draft[..., None, None]
            # the alternatives to a window's own slots take that slot's uniforms: one of them is used
            slots = SlotNoise(self.noise, seq[:, 0], predicts, self.attempts[seq, predicts])
            res = verify(
                None, branch_q, branch_drafts, num_slots, *slots.test_uniforms(K),
                target_logits=target, sampling=self.sampling, allowed=allowed,
                rule=self.rule, coupling=self.coupled,
                step_groups=self.step_groups, residual_noise=slots, check=False, profile=self.profile,
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
        rejected = (out.run_length == a + 1) & (a < D) & (draft >= 0).all(-1)
        at = a.clamp(max=D - 1)
        agree = (nodes.tokens[b, r, at, :, 0] == x[:, None]).sum(-1)  # [N, C] codebooks equal to x
        agree = torch.where(nodes.valid[b, r, at, :, 0] & rejected[:, None], agree, -1)
        best, best_cand = agree.max(-1)
        hit_mask = best == K
        use = (best > (draft == x).sum(-1)).nonzero()[:, 0]  # hits and near misses
        if len(use) == 0:
            return out, keep
        hb, hr, ha, hcand = b[use], r[use], a[use], best_cand[use]
        row = ((hb * R + hr) * D + ha) * C + hcand
        slot = torch.arange(c + 1, device=self.device)
        follow = (ha[:, None] + 1 + slot).clamp(max=S - 1)  # the window slots the branch predicts
        write = slot[None, :] < num_slots[row][:, None]  # [H, c+1]
        tokens, probs, run_length = out.tokens.clone(), out.target_probs.clone(), out.run_length.clone()
        at_rows = use[:, None].expand_as(follow)[write]
        tokens[at_rows, follow[write]] = res.tokens[row][write]
        probs[at_rows, follow[write]] = res.target_probs[row][write]
        h = hit_mask[use]
        run_length[use[h]] = ha[h] + 1 + res.run_length[row[h]]
        keep[hb[h], hr[h], ha[h], hcand[h]] = nodes.valid[hb[h], hr[h], ha[h], hcand[h]] & (slot[None, :] <= res.accepted[row[h]][:, None])
        return replace(out, tokens=tokens, target_probs=probs, run_length=run_length), keep

    def node_history(self, window_history) -> torch.Tensor:
        """Long `[B * R * D * C, c + 1, T]`: what node (j, cand, i) has seen: its window's
        history at slot j (committed tokens, then the drafts before slot j), then its branch's
        nodes up to itself."""
        nodes = self.nodes
        B, R, D, C, c1 = nodes.valid.shape
        b = torch.arange(B, device=self.device).repeat_interleave(R)
        base = window_history(b, torch.arange(R, device=self.device).repeat(B))[:, :D]  # [B * R, D, T]
        T = base.shape[-1]
        history = base.view(B, R, D, 1, 1, T).expand(B, R, D, C, c1, T).clone()
        at = nodes.acts_as.clamp(max=T - 1)
        for i in range(c1):  # node i sees nodes 0..i of its branch
            history[..., i, :].scatter_(-1, at[..., : i + 1], nodes.tokens[..., : i + 1, 0])
        return history.view(B * R * D * C, c1, T)

    def commit(self, keep: torch.Tensor, n: torch.Tensor, run_length: torch.Tensor) -> CacheMoves | None:
        """The kept nodes' cache entries (written at scratch position T + input index) that
        stand for positions now committed (before `n + run_length` of their window); slides
        what the branches carry by `run_length`."""
        nodes, T = self.nodes, self.layout.length
        self.carry = self.carry.slide(run_length)
        keep = keep & (nodes.acts_as < (n + run_length)[..., None, None, None])
        if not bool(keep.any()):
            return None
        B = keep.shape[0]
        keep, positions = keep.reshape(B, -1), nodes.acts_as.reshape(B, -1)
        return CacheMoves(torch.where(keep, T + nodes.index.reshape(B, -1), T), torch.where(keep, positions, T), keep)
