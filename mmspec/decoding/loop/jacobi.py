"""Jacobi decoding: SJD, MC-SJD and their relaxed and scheduled variants in one loop.

The schedule (`mmspec.decoding.schedules`) cuts the sequence into segments decoded side
by side: one in raster order, the rows of the grid under ZipAR, the frames of a video.
Each open segment keeps a window of L drafts after its first undecoded position n. One
forward serves every window of every sequence in the batch:

    inputs of a window = [step at n-1] + drafts at n .. n+L-1

(no draft on the segment's last position is fed: its output would predict outside the
segment). Input j predicts position n+j, so window slot j holds p for position n+j and the
draft there. Verification (`mmspec.kernels.verify`) commits the accepted drafts and one
drawn step per window; the window then slides by what it committed, and its later slots
carry their next drafts (q = their p) into the next iteration.

Cache rules: the step at n-1 and the accepted drafts were computed on committed context,
so their cache slots are committed; everything else is discarded by not committing it.
A segment whose predecessor is not decoded yet (a new ZipAR row) feeds a stand-in at
position n-1: the forced token there if the layout has one (an end-of-line token: exact
input, as ZipAR's Lumina port), else the previous segment's latest token (ZipAR's LlamaGen
port); a stand-in is never committed. When a segment finishes, its last step is fed once
more so that later segments can attend to it.

Names: `b` indexes the batch, `r` the segments (one window each), `slot` a window's slots
0..S-1 (S = L + 1); a *position* is an index into the generated sequence (the session maps
positions to its cache slots). A step is what a position holds: K tokens (one, or K
codebooks). A *window input* is one of a window's inputs before packing, indexed
r * S + t (t = 0 the step at n-1, t = j + 1 the draft of slot j); `committed` is the bool
mask of final positions, and a window's *run length* the slots one verification commits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
import torch
import torch.nn.functional as F

from mmspec.core.contracts import GuidedLogits, TokenSession
from mmspec.core.device import DeviceProfile, device_profile
from mmspec.core.layout import TokenLayout
from mmspec.core.noise import Noise, SlotNoise, as_noise
from mmspec.core.rules import bind_cached
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.auto.choice_log import ChoiceLog
from mmspec.decoding.auto.chooser import Choice, drafter_options, make_chooser
from mmspec.decoding.auto.cost_curve import CostCurve
from mmspec.decoding.auto.glue import GlueTimer
from mmspec.decoding.branches.candidates import Windows
from mmspec.decoding.branches.setting import branch_nodes, check_branches, preset_settings
from mmspec.decoding.branches.tree import Branches, CacheMoves
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.drafts import Hints, draws_at_random, first_drafts, uniform_winner
from mmspec.decoding.loop.active_rows import ActiveRows
from mmspec.decoding.loop.head_drafts import HeadDrafter
from mmspec.decoding.loop.stopping import Stopping
from mmspec.decoding.loop.window_io import Inputs, Verified
from mmspec.decoding.stats import DecodeStats
from mmspec.decoding.steps import allowed_steps, draw_step, forward_steps, keyed_draw, prefill_steps, prompt_steps, step_logits
from mmspec.kernels.verify import verify, verify_keyed
from mmspec.kernels.verify_keyed import rank_scores


def branch_options(config: DecodingConfig, profile: DeviceProfile | torch.device, tree: bool = True) -> tuple:
    """The branch settings a call may use: the fixed one, or under auto with `branches`
    unset the device profile's presets (on a CPU none: a branch forward costs several plain
    ones, and its scratch positions make every forward's attention longer) where `tree` (the
    session offers tree attention and no logits processors run), and none."""
    if not config.chooses:
        return (config.branch_setting,)
    if config.branches is None:
        return (None,) + (preset_settings(device_profile(profile)) if tree else ())
    return (None, config.branch_setting) if config.branches else (None,)


def extra_positions(layout: TokenLayout, config: DecodingConfig, profile: DeviceProfile | torch.device) -> int:
    """Scratch positions a batched forward may need past the end (padding inputs, branches),
    on the device of `profile` (a profile, or the device the model lives on)."""
    R = len(config.scheduler.plan(layout))
    nodes = [branch_nodes(setting, config.draft_window, layout) for setting in branch_options(config, profile) if setting is not None]
    return R * (config.draft_window + 1 + max(nodes, default=0))


class JacobiLoop:
    """The state of one decoding call and its named phases; `run()` loops them."""

    def __init__(self, session: TokenSession, layout: TokenLayout, sampling: SamplingConfig, config: DecodingConfig,
                 noise: Noise, stopping: Stopping, processors=(), cost: CostCurve | None = None,
                 profile: DeviceProfile | None = None):
        self.session = ActiveRows(session)  # finished sequences leave the forwards
        self.layout, self.sampling, self.config = layout, sampling, config
        self.noise, self.stopping, self.processors = noise, stopping, tuple(processors)
        self.keyed = config.keyed  # else SJD / MC-SJD, their uniforms keyed by (row, position, attempt)
        self.rule = bind_cached(config.rule, layout.token_embeddings, layout.allowed)
        self.drafter = config.drafter
        self.step_groups = config.step_groups(layout.tokens_per_step)
        self.device = device = session.prefill_logits().cond.device
        self.profile = device_profile(device if profile is None else profile)  # what this device does: kernels, branches, sync
        B, T, K, V = session.batch_size, layout.length, layout.tokens_per_step, layout.vocab_size
        # SJD / MC-SJD: how often each position was verified, so that a test draws fresh uniforms
        self.attempts_at = torch.zeros(B, T + 1, dtype=torch.long, device=device)
        branch_settings = branch_options(config, self.profile, getattr(session, "supports_tree", False))
        self.branches = None  # the call's branches, when a setting may use them
        if any(setting is not None for setting in branch_settings):
            check_branches(session)
            self.branches = Branches(layout, sampling, self.rule, config.coupled, self.step_groups, noise,
                                     self.attempts_at, self.keyed, self.profile, self.processors)
        # keyed: the most runners-up a branch setting takes as candidates (besides the winner)
        self.ranked = 1 + max((s.candidates for s in branch_settings if s is not None), default=-1)
        plan = config.scheduler.plan(layout)
        self.starts, self.ends = plan.starts.to(device), plan.ends.to(device)
        self.parent, self.need = plan.parent.to(device), plan.need.to(device)
        R, L = len(plan), config.draft_window
        if self.keyed:
            noise.remember(R, K, V)
        self.B, self.T, self.K, self.V, self.R, self.L, self.S = B, T, K, V, R, L, L + 1
        self.prompt = prompt_steps(session, K)

        # per position, with one spare column past the end that writes to nothing in use go to
        # (scatters instead of gathering the positions a mask selects)
        self.tokens_at = torch.full((B, T + 1, K), -1, dtype=torch.long, device=device)
        self.committed_at = torch.zeros(B, T + 1, dtype=torch.bool, device=device)
        self.kv_done_at = torch.zeros(B, T + 1, dtype=torch.bool, device=device)  # the cache slot is committed
        self.iteration_at = torch.zeros(B, T + 1, dtype=torch.long, device=device)
        self.tokens, self.committed = self.tokens_at[:, :T], self.committed_at[:, :T]
        self.kv_done, self.commit_iteration = self.kv_done_at[:, :T], self.iteration_at[:, :T]
        self.drafts = torch.full((B, R, L, K), -1, dtype=torch.long, device=device)
        # q of the drafts: first drafts are one-hot and carried as their ids alone; the
        # next drafts of a verified window carry its p
        self.q_carried = torch.zeros(B, R, L, dtype=torch.bool, device=device)  # slot has a dense q
        self.q_dense = torch.zeros(B, R, 0, K, V, device=device)  # the carried p of the first slots (zeros: none)
        self.n = self.starts.expand(B, R).clone()  # first undecoded position of each window
        self.opened = (self.parent < 0).expand(B, R).clone()
        self.hints = None  # redraft: the last forward's predictions and the drafts it was fed
        self.b = torch.arange(B, device=device)[:, None]
        self.slot = torch.arange(self.S, device=device)
        self.slot_L = self.slot[:L]
        self.window_slots = {}  # window length -> bool [L]: the slots it feeds
        self.last_pos = (self.ends - 1)[None, :, None]  # a segment's last position: no draft there is fed
        self.window_input_ids = torch.arange(R * self.S, device=device)[None]
        self.window_input_segments = torch.arange(R, device=device).repeat_interleave(self.S)[None].expand(B, -1)
        self.forced = None if layout.forced is None else layout.forced.to(device)
        self.forwards = 0
        # this forward's setting: fixed by the config, or picked by auto's chooser
        if self.drafter is None and not config.chooses:  # auto with its choices fixed: the first drafter it offers
            self.drafter = drafter_options(layout, self.prompt is not None)[0]
        self.head = None  # learned drafts after the commit front
        if config.head not in (None, False) and self.uses_head(config):
            self.head = HeadDrafter(config.head, self.session, layout, sampling, noise, self.keyed, config.head_depth, device)
        self.last_hidden = None  # the last forward's hidden states, for the head
        self.choice = Choice(L, config.branch_setting, self.drafter, self.head is not None)
        self.chooser, self.choices = None, None
        if config.chooses:
            self.cost = cost or CostCurve.flat(B)
            self.chooser = make_chooser(config, layout, self.cost, branch_settings, min(L, T - 1), device, self.prompt,
                                        self.head is not None)
            self.choices = ChoiceLog()
            self.glue = GlueTimer(self.cost, self.profile)
            # window 0 as a plain AR step: one segment (raster order)
            self.chooser.ar_steps = R == 1
        # auto: since the last choice, the run lengths and their part by branches, and the
        # rejections, per window summed over forwards (on the device, read at the next choice),
        # and the positions committed
        self.observed = torch.zeros(3, device=device)
        # auto with a head: since the last choice, the head's and the carried drafts' hits at the
        # first slot, on the same forwards (the head's worth, measured paired)
        self.front_hits = torch.zeros(2, device=device)
        self.front_drafts = None  # (the carried draft, the head's) at each window's first slot, this forward
        self.forwards_at_choice = 0
        self.committed_at_choice = self.committed.clone()

    def uses_head(self, config: DecodingConfig) -> bool:
        """Whether this call can draft with the config's head: one segment, one token a
        step, no branches, processors or redrafting, and a session that gives hidden states."""
        return (self.R == 1 and self.K == 1 and self.branches is None and not self.processors and not config.redraft
                and hasattr(self.session.session, "hidden_layers"))

    # -- phases ------------------------------------------------------------------------

    def prefill(self) -> None:
        """The prefill predicts position 0, drawn as AR does."""
        first = draw_step(prefill_steps(self.session, self.K), 0, self.layout, self.sampling, self.noise,
                          self.tokens, self.committed, self.processors, self.prompt)
        self.commit_run(torch.zeros_like(self.b), first[:, None], torch.ones_like(self.b, dtype=torch.bool))
        self.n[:, 0] = 1
        self.forwards = self.forwards_at_choice = 1  # the prefill fed no window: auto learns nothing from it

    def open_windows(self) -> torch.Tensor:
        """Opens the segments whose parent has progressed enough; gives first drafts to
        the slots of live windows that have none. Returns `live [B, R]`."""
        if self.R > 1:
            progress = (self.n - self.starts).gather(1, self.parent.clamp(min=0).expand(self.B, -1))
            self.opened |= progress >= self.need
        live = self.live()
        if self.head is not None and self.choice.head:
            if self.chooser is not None:
                self.glue.begin_head()
            self.place_head_drafts(live)
            if self.chooser is not None:
                self.glue.end_head()
        slot_pos = self.n[..., None] + self.slot_L  # [B, R, L]
        in_seg = slot_pos < self.ends[None, :, None]
        undrafted = (self.drafts < 0).any(-1)
        # only the slots this forward feeds: a slot past a shorter window is drafted when it
        # enters one, from the context then (a copy from above has its source by then)
        need = live[..., None] & in_seg & undrafted & self.fed_slots()
        if bool(need.any()):
            history = self.tokens.clone()
            placed = live[..., None] & in_seg & ~undrafted
            history[self.b[..., None].expand_as(slot_pos)[placed], slot_pos[placed]] = self.drafts[placed]
            where = torch.where(need, slot_pos, -1).view(self.B, -1)
            timed = self.chooser is not None and self.config.redraft  # drafting that grows with the window
            if timed:
                self.glue.begin_draft()
            new = first_drafts(self.drafter, history, where, self.layout, self.prompt, self.draft_noise(where), self.hints)
            if timed:
                self.glue.end_draft(int(need.any(0).sum()))
            new = new.view(self.B, self.R, self.L, self.K)
            self.drafts = torch.where(need[..., None], new, self.drafts)
            self.q_carried &= ~need
        return live

    def place_head_drafts(self, live: torch.Tensor) -> None:
        """The head's drafts for the first slots of each live window (one segment), with
        their q under SJD / MC-SJD."""
        slots = min(self.config.head_depth, self.choice.window, self.L)
        if slots < 1 or not bool(live.any()):
            return
        drafts, q = self.head.drafts(self.tokens, self.n[:, 0], live[:, 0], self.drafts[:, 0, :slots, 0], self.attempts_at)
        made = (drafts >= 0).all(-1)  # [B, slots]
        if self.chooser is not None:
            self.front_drafts = (torch.where(made[:, 0], self.drafts[:, 0, 0, 0], -1), torch.where(made[:, 0], drafts[:, 0, 0], -1))
        self.drafts[:, 0, :slots] = torch.where(made[..., None], drafts, self.drafts[:, 0, :slots])
        if q is None:
            self.q_carried[:, 0, :slots] &= ~made
            return
        if self.q_dense.shape[2] < slots:
            self.q_dense = F.pad(self.q_dense, (0, 0, 0, 0, 0, slots - self.q_dense.shape[2]))
        self.q_dense[:, 0, :slots] = torch.where(made[..., None, None], q, self.q_dense[:, 0, :slots])
        self.q_carried[:, 0, :slots] |= made

    def draft_noise(self, where: torch.Tensor) -> torch.Tensor:
        """What a random first draft at `where [B, J]` draws with: keyed, the draft itself,
        long `[B, J, K]` (the uniform distribution's winner under the slot's Gumbel noise,
        coupled with the target's); else keyed uniforms of (row, position, attempt); zeros
        when the drafter draws none."""
        at = torch.where(where >= 0, where, self.n[:, :1].clamp(max=self.T - 1))  # skipped slots: a position in use
        if not draws_at_random(self.drafter):
            return torch.zeros(*at.shape, self.K, dtype=torch.float64, device=self.device)
        if self.keyed:
            return uniform_winner(self.noise, self.b[:, 0], at, allowed_steps(self.layout, at), self.K, self.V)
        return self.noise.uniform("draft", self.b[:, 0], at, self.K, self.attempts_at.gather(1, at))

    def random_drafts_at(self, where: torch.Tensor) -> torch.Tensor | None:
        """Keyed: what a random first draft would have been at the positions `where [B, T]`
        marks (the allowed tokens' Gumbel winner), -1 elsewhere."""
        if not self.keyed:
            return None
        b, pos = where.nonzero(as_tuple=True)
        out = torch.full((self.B, self.T, self.K), -1, dtype=torch.long, device=self.device)
        if len(pos):
            out[b, pos] = uniform_winner(self.noise, b, pos[:, None], allowed_steps(self.layout, pos[:, None]), self.K,
                                           self.V)[:, 0]
        return out

    def live(self) -> torch.Tensor:
        """Bool `[B, R]`: the windows with positions left to decode."""
        live = self.n < self.ends
        if len(self.stopping.stop_tokens):
            live = live & ~self.stopping.finished[:, None]
        return live if self.R == 1 else live & self.opened  # one segment is open from the start

    def fed_slots(self) -> torch.Tensor:
        """Bool `[L]`: the window slots the chosen window feeds."""
        w = self.choice.window
        if w not in self.window_slots:
            self.window_slots[w] = self.slot_L < w
        return self.window_slots[w]

    def pack_inputs(self, live: torch.Tensor) -> Inputs:
        """Per window its predecessor at n-1, then the drafts that predict inside the
        segment; valid inputs first, padded to the longest sequence of the batch."""
        B, R, S, T, n = self.B, self.R, self.S, self.T, self.n
        slot_pos = n[..., None] + self.slot_L
        fed = live[..., None] & (slot_pos < self.last_pos) & self.fed_slots()  # [B, R, L]
        drafted = (self.drafts >= 0).all(-1)
        fed &= drafted.long().cumprod(-1).bool()  # up to the first slot without a draft
        if R == 1:  # raster order: everything before n is committed, and the valid inputs are a prefix
            by_window_valid = torch.cat([live[..., None], fed], -1).view(B, S)
            M = int(by_window_valid.sum(1).max())
            valid, pad = by_window_valid[:, :M], self.window_input_ids[:, :M]
            pred_tok = self.tokens[self.b, n - 1]
            tokens = torch.cat([pred_tok[:, :, None], self.drafts.clamp(min=0)], 2).view(B, S, self.K)[:, :M]
            return Inputs(
                tokens=torch.where(valid[..., None], tokens, 0),
                positions=torch.where(valid, n - 1 + pad, T + pad),
                segments=None,  # one segment: padding inputs at scratch slots are seen by no valid input
                valid=valid,
                take=pad.expand(B, M),
                num_slots=torch.where(live, 1 + fed.sum(-1), 0),
                slot_input=torch.where(by_window_valid, self.slot, 0),
                on_committed_context=by_window_valid,
            )
        pred_pos = (n - 1).clamp(min=0)
        has_pred, pred_known, pred_tok = self.segment_predecessors(live, pred_pos)
        # the window inputs [B, R*S]: per window its input at n-1, then its drafts
        by_window_valid = torch.cat([has_pred[..., None], fed], -1).view(B, -1)
        by_window_tokens = torch.cat([pred_tok[:, :, None], self.drafts.clamp(min=0)], 2).view(B, R * S, self.K)
        by_window_pos = torch.cat([pred_pos[..., None], slot_pos], -1).view(B, -1)
        by_window_known = torch.cat([pred_known[..., None], fed], -1).view(B, -1)
        M = int(by_window_valid.sum(1).max())
        pad = self.window_input_ids[:, :M]
        take = torch.argsort((~by_window_valid).int(), dim=1, stable=True)[:, :M]  # valid window inputs first
        pick = lambda x: x.gather(1, take if x.dim() == 2 else take[..., None].expand(B, M, self.K))
        valid = pick(by_window_valid)
        return Inputs(
            tokens=torch.where(valid[..., None], pick(by_window_tokens), 0),
            positions=torch.where(valid, pick(by_window_pos), T + pad),
            segments=torch.where(valid, pick(self.window_input_segments), R + pad),
            valid=valid,
            take=take,
            num_slots=torch.where(live, 1 + fed.sum(-1), 0),
            slot_input=torch.where(by_window_valid, by_window_valid.long().cumsum(1) - 1, 0),
            on_committed_context=by_window_known,
        )

    def segment_predecessors(self, live: torch.Tensor, pred_pos: torch.Tensor) -> tuple:
        """Several segments: which windows feed an input at n-1 (live ones, and finished
        ones whose last step later segments still need), whether it is committed, and its
        token (a stand-in where it is not)."""
        B, R, T, n = self.B, self.R, self.T, self.n
        pending = (n == self.ends) & (self.ends < T) & ~self.kv_done.gather(1, (self.ends - 1).expand(B, R))
        pending &= ~self.stopping.finished[:, None]
        # a new segment whose predecessor is that last step feeds it itself
        pending[:, :-1] &= ~(live[:, 1:] & (n[:, 1:] == self.starts[1:]))
        has_pred = live | pending
        pred_known = self.committed.gather(1, pred_pos)
        stand_in = torch.zeros(B, R, self.K, dtype=torch.long, device=self.device)
        stand_in[:, 1:] = self.tokens[self.b, (n[:, :-1] - 1).clamp(min=0)].clamp(min=0)
        if self.forced is not None:
            forced = self.forced[pred_pos].view(B, R, -1)
            stand_in = torch.where(forced >= 0, forced, stand_in)
        pred_tok = torch.where(pred_known[..., None], self.tokens[self.b, pred_pos], stand_in)
        return has_pred, has_pred & pred_known, pred_tok

    def window_history(self, b: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """Long `[N, S, T]` for the windows `(b, r)`: what window slot j has seen (committed
        tokens before the window, then the window's drafts before slot j), for
        history-dependent processors."""
        pos = torch.arange(self.T, device=self.device)
        n = self.n[b, r][:, None, None]  # [N, 1, 1]
        offset = pos - n  # index into the window's drafts
        known = torch.where(self.committed[b], self.tokens[b, :, 0], -1)[:, None]  # [N, 1, T]
        drafts = self.drafts[b, r, :, 0].gather(1, offset[:, 0].clamp(0, self.L - 1))[:, None]  # [N, 1, T]
        before_slot = (offset >= 0) & (offset < self.slot[:, None])  # [N, S, T]
        return torch.where(before_slot, drafts, torch.where(offset < 0, known, -1))

    def forward_and_verify(self, inputs: Inputs, live: torch.Tensor) -> tuple["Verified", torch.Tensor | None]:
        """One forward, then verification of the live windows: window slot j gets p for
        position n+j from window input j. With branches, also which branch nodes hold
        committed context."""
        B, R, S, K, V, T, L = self.B, self.R, self.S, self.K, self.V, self.T, self.L
        if self.chooser is not None:
            self.glue.begin_forward()
        logits = forward_steps(self.session, inputs.tokens, inputs.positions, inputs.segments, inputs.tree)
        if self.chooser is not None:
            self.glue.end_forward(inputs.tokens.shape[1] * self.session.held / self.B)
        self.forwards += 1
        self.last_hidden = logits.hidden
        M = inputs.take.shape[1]  # the window inputs; branch nodes follow them
        main = logits if inputs.tree is None else GuidedLogits(*(None if x is None else x[:, :M] for x in (logits.cond, logits.uncond)))
        window = live.view(-1).nonzero()[:, 0]  # the live windows, b * R + r
        b, r = window // R, window % R
        every = len(window) == B * R  # then per-window tensors are views, not gathers
        at = (lambda x: x.view(B * R, *x.shape[2:])) if every else (lambda x: x[b, r])
        # the slots that can have a p: those of the chosen window and the one after it (a
        # branch's run may reach past them); the later ones pass through unverified
        Sv = S if inputs.tree is not None else min(S, self.choice.window + 1)
        if R == 1 and every and inputs.tree is None:  # slot j is input j (none past the M inputs has a p)
            Sv = min(Sv, M)
            slot_logits = lambda x: x[:, :Sv]
        else:
            by_slot = at(inputs.slot_input.view(B, R, S))[:, :Sv]  # [N, Sv]: input feeding each slot
            slot_logits = lambda x: x[b[:, None], by_slot]
        Lv = min(L, Sv)  # of them, the slots that hold a draft
        win_pos = (at(self.n)[:, None] + self.slot[:Sv]).clamp(max=T - 1)  # [N, Sv]
        picked = GuidedLogits(slot_logits(main.cond), None if main.uncond is None else slot_logits(main.uncond))
        # processors score each window slot with its own history
        history = self.window_history(b, r)[:, :Sv] if self.processors else None
        prompt = None if self.prompt is None or every else self.prompt[b]
        target = step_logits(picked, win_pos, self.sampling, self.processors, self.prompt if every else prompt, history)
        drafts = at(self.drafts)[:, :Lv]
        if R > 1:  # a segment's last drafts predict outside it
            drafts = torch.where((win_pos[:, :Lv] < self.ends[r][:, None])[..., None], drafts, -1)
        if Sv > L:  # the slot after the last draft has a p and no draft
            drafts = torch.cat([drafts, drafts.new_full((len(window), 1, K), -1)], 1)
        num_slots = at(inputs.num_slots)
        allowed = allowed_steps(self.layout, win_pos)
        if self.keyed:
            out = verify_keyed(target, drafts, num_slots, noise=self.noise, rows=b, positions=win_pos, sampling=self.sampling,
                               allowed=allowed, ranked=self.ranked if inputs.tree is not None else 0, check=False,
                               profile=self.profile)
            if out.ranked is not None:  # the branches' stand-in for q: the runners-up by perturbed score
                out.target_probs = rank_scores(out.ranked, V)
        else:
            out = self.verify_sampled(target, drafts, num_slots, allowed, b, r, win_pos, at, Lv, Sv)
        keep, main = None, out
        if inputs.tree is not None:
            out, keep = self.branches.merge(logits, out, b, r, drafts, self.prompt, self.window_history)
        if not self.keyed:  # a position verified again draws fresh uniforms
            tested = (self.slot[:Sv] < num_slots[:, None]).long()  # clamped positions repeat: accumulate
            self.attempts_at.index_put_((b[:, None].expand_as(win_pos), win_pos), tested, accumulate=True)
        if self.chooser is not None:
            rejected = main.accepted < num_slots - 1  # a fed draft was rejected
            self.observed += torch.stack([out.run_length.sum(), (out.run_length - main.run_length).sum(), rejected.sum()]) / max(len(b), 1)
        return Verified.scatter(out, b, r, self.drafts, S), keep

    def verify_sampled(self, target, drafts, num_slots, allowed, b, r, win_pos, at, Lv: int, Sv: int):
        """SJD / MC-SJD verification of the live windows `(b, r)`, with the dense q of their
        drafts and uniforms keyed by (row, position, attempt)."""
        K, V = self.K, self.V
        q = F.one_hot(drafts[:, :Lv].clamp(min=0), V).float()  # first drafts: one-hot
        carried = min(Lv, self.q_dense.shape[2])  # no later slot is carried
        if carried:  # carried drafts: the p of their slot in the last verification
            q[:, :carried] = torch.where(at(self.q_carried)[:, :carried, None, None], at(self.q_dense)[:, :carried], q[:, :carried])
        if Sv > Lv:  # the slot after the last draft has a p and no draft
            q = torch.cat([q, q.new_zeros(len(b), Sv - Lv, K, V)], 1)
        slots = SlotNoise(self.noise, b, win_pos, self.attempts_at[b[:, None], win_pos])
        return verify(
            None, q, drafts, num_slots, *slots.test_uniforms(K),
            target_logits=target, sampling=self.sampling, allowed=allowed,
            rule=self.rule, coupling=self.config.coupled,
            step_groups=self.step_groups, residual_noise=slots, check=False, profile=self.profile,
        )

    def commit_run(self, pos: torch.Tensor, steps: torch.Tensor, mask: torch.Tensor) -> None:
        """Commits `steps [B, ..., K]` at positions `pos [B, ...]` of each sequence where `mask`."""
        at = torch.where(mask, pos, self.T).view(self.B, -1)
        self.tokens_at.scatter_(1, at[..., None].expand(-1, -1, self.K), steps.reshape(self.B, -1, self.K))
        self.committed_at.scatter_(1, at, True)
        self.iteration_at.scatter_(1, at, max(self.forwards - 1, 0))
        self.stopping.update(self.tokens, self.committed)

    def mark_kv_done(self, positions: torch.Tensor, mask: torch.Tensor) -> None:
        """Notes that the cache slots of `positions [B, n]` hold committed context where `mask`."""
        self.kv_done_at.scatter_(1, torch.where(mask, positions, self.T), True)

    def commit_and_slide(self, inputs: Inputs, verified: "Verified", branch_keep: torch.Tensor | None = None) -> None:
        """Commits each window's run, keeps the cache entries computed on committed
        context, and slides the windows, carrying the later slots' next drafts."""
        B, S, K, V, L = self.B, self.S, self.K, self.V, self.L
        num_slots = inputs.num_slots
        run_length = self.stopping.cut(verified.run_length, verified.tokens)
        if self.front_drafts is not None:  # keyed: the first slot's token is final, whatever was drafted there
            drawn = verified.tokens[:, 0, 0, 0]
            self.front_hits += torch.stack([(d == drawn) & (d >= 0) for d in self.front_drafts]).sum(1)
            self.front_drafts = None
        self.commit_run(self.n[..., None] + self.slot, verified.tokens, self.slot < run_length[..., None])
        if self.head is not None:
            self.record_for_head(run_length, num_slots, verified)
        M = inputs.take.shape[1]
        draft_ok = (self.slot < verified.accepted[..., None] + 1).view(B, -1)  # the input at n-1, then accepted drafts
        if self.R == 1:  # the inputs are the window inputs, valid ones first
            keep = draft_ok[:, :M] & inputs.valid
        else:
            keep = (inputs.on_committed_context & draft_ok).gather(1, inputs.take) & inputs.valid
        positions = inputs.positions[:, :M]
        self.session.commit(positions, keep)
        self.mark_kv_done(positions, keep)
        if branch_keep is not None:  # a branch sees its window's input at n-1: committed unless a stand-in
            pred_true = inputs.on_committed_context.view(B, self.R, S)[..., 0]
            moves = self.branches.commit(branch_keep & pred_true[..., None, None, None], self.n, run_length)
            if moves is not None:
                self.keep_moved(moves)
        self.n = self.n + run_length
        src = self.slot_L + run_length[..., None]  # new slot i takes old slot i + run length
        self.q_carried = src < num_slots[..., None]
        kept = -1
        if self.choice.window < L:
            # drafts a shorter window left unfed stay as they are: given the past they are point
            # masses, so their q is one-hot (and drafting them again would cost a drafter pass)
            old = self.drafts.gather(2, src.clamp(max=L - 1)[..., None].expand(-1, -1, -1, K))
            unfed = (src < L) & (src >= self.choice.window) & ~self.q_carried & (old >= 0).all(-1)
            kept = torch.where(unfed[..., None], old, -1)
        src = src.clamp(max=S - 1)
        carried = torch.where(self.q_carried[..., None], verified.tokens.gather(2, src[..., None].expand(-1, -1, -1, K)), kept)
        if self.config.redraft:  # every slot is drafted afresh at the next forward, the carried tokens as hints
            fed = self.drafts.gather(2, src.clamp(max=L - 1)[..., None].expand(-1, -1, -1, K))
            fed = torch.where((src < L)[..., None], fed, -1)
            self.hints = Hints(carried.view(B, -1, K), fed.view(B, -1, K), (self.slot_L == 0).repeat(self.R))
            carried = torch.full_like(carried, -1)
            self.q_carried.zero_()
        self.drafts = carried
        if verified.target_probs is None:  # keyed, without branches this forward: the drafts are the whole state
            self.q_carried.zero_()  # a later branch forward ranks their candidates afresh
            return
        b, r = verified.b, verified.r
        every = len(b) == B * self.R
        # the p of the new slots that can carry one: those before the last verified slot
        Sv = verified.target_probs.shape[1]
        verified_src = (src.view(B * self.R, L) if every else src[b, r])[:, :min(L, Sv)].clamp(max=Sv - 1)
        dense = verified.target_probs.gather(1, verified_src[..., None, None].expand(-1, -1, K, V))
        if every:
            self.q_dense = dense.view(B, self.R, *dense.shape[1:])
        else:
            self.q_dense = dense.new_zeros(B, self.R, *dense.shape[1:])
            self.q_dense[b, r] = dense

    def record_for_head(self, run_length: torch.Tensor, num_slots: torch.Tensor, verified: "Verified") -> None:
        """Keeps for the head (one segment) the hidden states that predicted the committed
        positions (window input j predicted slot j) and, where the new front's draft was fed
        and rejected, that draft and the hidden states on it (window input `run_length`)."""
        hidden = self.last_hidden
        M = hidden.shape[1]
        self.head.record(hidden, self.n + self.slot[:M], self.slot[:M] < run_length)
        last = (run_length - 1).clamp(min=0)[:, 0]  # the front's slot
        draft = self.drafts[:, 0, :, 0].gather(1, last.clamp(max=self.L - 1)[:, None])[:, 0]
        drawn = verified.tokens[:, 0, :, 0].gather(1, last[:, None])[:, 0]
        rejected = (run_length < num_slots)[:, 0] & (run_length > 0)[:, 0] & (draft >= 0) & (draft != drawn)
        on_draft = hidden[torch.arange(len(hidden), device=self.device), self.head.both(run_length[:, 0].clamp(max=M - 1))]
        self.head.record_rejected(on_draft, draft.clamp(min=0), (self.n + run_length - 1)[:, 0], rejected)

    def keep_moved(self, moves: CacheMoves) -> None:
        """Moves cache entries the branches computed on committed context to the positions
        they stand for, and commits them there."""
        self.session.relocate(moves.sources, moves.positions, moves.mask)
        self.session.commit(moves.positions, moves.mask)
        self.mark_kv_done(moves.positions, moves.mask)

    def windows(self) -> Windows:
        """The windows as branches see them, with the dense q of every draft (its carried
        p, or one-hot)."""
        q = F.one_hot(self.drafts.clamp(min=0), self.V).float()
        carried = self.q_dense.shape[2]  # no later slot is carried
        q[:, :, :carried] = torch.where(self.q_carried[:, :, :carried, None, None], self.q_dense, q[:, :, :carried])
        return Windows(self.n, self.drafts, q, self.q_carried, self.tokens, self.committed)

    def run(self, on_step: Callable[[int, int], None] | None = None,
            on_commit: Callable[[torch.Tensor], None] | None = None) -> tuple[torch.Tensor, DecodeStats]:
        start = time.perf_counter()
        self.prefill()
        done = self.B  # steps done, over the batch
        while True:
            if on_step:
                on_step(done // self.B, self.T)
            if on_commit:
                on_commit(self.tokens[..., 0] if self.K == 1 else self.tokens)
            if done == self.B * self.T:
                break
            if self.chooser is not None:
                self.glue.begin_iteration()
                if (self.forwards - 1) % self.chooser.every == 0:
                    self.choose()
            if self.chooser is not None and self.choice.window == 0 and self.chooser.ar_steps:
                self.ar_step()
                self.glue.end_iteration("ar_glue_s")
            else:
                live = self.open_windows()
                inputs = self.pack_inputs(live)
                if self.choice.branches is not None:
                    inputs = self.branches.extend(self.windows(), live, inputs, self.choice.branches)
                self.commit_and_slide(inputs, *self.forward_and_verify(inputs, live))
                if self.chooser is not None:
                    self.glue.end_iteration("glue_s")
            done = self.drop_finished()
        tokens = self.stopping.padded(self.tokens)
        stats = DecodeStats(
            method=self.config.name,
            exact=self.config.exact,
            forward_passes=self.forwards,
            tokens_committed=int(self.stopping.lengths.sum()) * self.K,
            wall_time_s=time.perf_counter() - start,
            commit_iteration=self.stopping.padded_iterations(self.commit_iteration),
            lengths=self.stopping.lengths.clone(),
            choices=None if self.choices is None else self.choices.to_dict(),
            cost_curve=None if self.chooser is None else self.cost.relative(),
            device=self.profile.describe(),
        )
        return (tokens[..., 0] if self.K == 1 else tokens), stats

    def drop_finished(self) -> int:
        """Steps done over the batch; drops the sequences that just finished from the forwards."""
        done = self.stopping.done(self.committed)
        finished = done.all(1)
        steps, count = torch.stack([done.sum(), finished.sum()]).tolist()
        if count > self.session.dropped:
            self.session.drop(finished, count)
        return steps

    def ar_step(self) -> None:
        """auto's window 0 in one segment: AR's step, feeding each sequence's last committed
        step and drawing the next from its p. The windows' drafts are dropped (the next
        Jacobi forward drafts afresh)."""
        n = self.n[:, 0]  # [B]
        live = (n < self.T) & ~self.stopping.finished
        pos = (n - 1).clamp(max=self.T - 1)[:, None]  # [B, 1]
        if self.chooser is not None:
            self.glue.begin_forward()
        logits = forward_steps(self.session, self.tokens[self.b, pos], pos)
        if self.chooser is not None:
            self.glue.end_forward(self.session.held / self.B)
        self.forwards += 1
        if self.head is not None:
            self.head.record(logits.hidden, n[:, None].clamp(max=self.T - 1), live[:, None])
        fresh = live[:, None] & ~self.kv_done.gather(1, pos)
        self.session.commit(pos, fresh)
        self.mark_kv_done(pos, fresh)
        at = n.clamp(max=self.T - 1)[:, None]
        history = torch.where(self.committed, self.tokens[..., 0], -1)[:, None] if self.processors else None  # the prefix before n
        target = step_logits(logits, at, self.sampling, self.processors, self.prompt, history)
        self.commit_run(at, keyed_draw(target, at, self.layout, self.sampling, self.noise, self.b[:, 0]), live[:, None])
        self.n[:, 0] = n + live.long()
        self.drafts.fill_(-1)
        self.q_carried.zero_()
        self.hints = None  # a redrafting loop's hints are the last Jacobi forward's, for slots that moved since
        if self.branches is not None:
            self.branches.reset()

    def choose(self) -> None:
        """auto: the window, branches and first drafts of the next forwards, from the past alone."""
        run_tokens, by_branches, rejections = self.observed.tolist()
        if self.head is not None:
            self.chooser.observe_front(*self.front_hits.tolist())
            self.front_hits.zero_()
        scale, excess_s = self.glue.fit()
        self.chooser.observe(self.choice, run_tokens, by_branches, self.forwards - self.forwards_at_choice,
                             self.glue.estimate("glue_s"), self.glue.estimate("ar_glue_s"), scale=scale, excess_s=excess_s,
                             draft_s=self.glue.estimate("draft_s"), rejections=rejections,
                             head_s=self.glue.estimate("head_s"))
        self.observed.zero_()
        self.forwards_at_choice = self.forwards
        new = self.committed & ~self.committed_at_choice
        self.chooser.observe_commits(self.tokens, new, self.committed, self.random_drafts_at(new))
        self.committed_at_choice = self.committed.clone()
        live = self.live()
        # the curve is the cost at all B rows; with fewer rows held, a forward costs about
        # what the same inputs in all spread over B rows do
        held = self.session.held
        choice = self.chooser.choose(max(1, -(-int(live.sum()) // held)) * held / self.B)
        if choice.branches != self.choice.branches:  # kept branch drafts belong to the old setting
            self.branches.reset()
        if self.head is not None and not choice.head and choice.window and self.chooser.drops_head:
            self.drop_head()  # the head does not pay here
        self.choice = choice
        self.drafter = choice.drafter or self.config.drafter or self.drafter
        self.choices.add(choice)

    def drop_head(self) -> None:
        """auto found a Jacobi forward faster without the head: it stops feeding it for the rest
        of the call (the bookkeeping costs too), and chooses without it. Its measured worth would
        not change while it is off, so it would not be chosen again."""
        self.head = None
        self.session.hidden_layers = None
        self.chooser.front_hits = None
        self.front_drafts = None


def decode_jacobi(
    session: TokenSession,
    layout: TokenLayout,
    sampling: SamplingConfig,
    config: DecodingConfig,
    noise: Noise | torch.Generator | list | None = None,
    on_step: Callable[[int, int], None] | None = None,
    stopping: Stopping | None = None,
    processors=(),
    on_commit: Callable[[torch.Tensor], None] | None = None,
    cost: CostCurve | None = None,
    profile: DeviceProfile | None = None,
) -> tuple[torch.Tensor, DecodeStats]:
    """Decodes `layout.length` steps per sequence with `config`; see the module docstring.

    The session must have been started with `extra_positions(layout, config, profile)`.
    `noise`: the call's keyed noise, or the generator(s) its keys are drawn from.
    `cost`: auto's cost curve of the model's forward (flat when not given).
    `profile`: what the device does (`mmspec.core.device`); by default, the session's device's.
    """
    device = session.prefill_logits().cond.device
    stopping = stopping or Stopping.none(session.batch_size, layout.length, device)
    noise = as_noise(noise, session.batch_size, device)
    return JacobiLoop(session, layout, sampling, config, noise, stopping, processors, cost, profile).run(on_step, on_commit)
