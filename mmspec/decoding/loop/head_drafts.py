"""Learned drafts after the commit front: a draft head's prediction from the token just drawn.

After a verification the window's next drafts were computed on a context whose last draft
was rejected: the slot after the commit front drafts from a stale distribution. A draft
head (`mmspec.models.networks.draft_head`) is fed, at each committed position, the token
there and the target's hidden state that predicted it; at the front it also reads the
draft rejected there and the target's hidden state on it (what the last forward computed
on the right context but the wrong token), and predicts the position after the token just
drawn. With `depth` > 1 it rolls out over the next slots, each step fed the draft before
and its own feature, as long as its drafts differ from the window's current ones.

The drafts are exact either way: keyed, a slot's draft is the Gumbel winner of the head's
guided distribution under the slot's own noise (a guess the verification checks); under
SJD / MC-SJD it is drawn from the head's q with the slot's keyed `head` uniform, and q goes
to the verification as the draft's distribution.

The head's cache holds what it was fed at committed positions (`fed` per row); each round
feeds the positions committed since (their hidden states are kept as the forwards return
them, `record`) and queries the front in the same call (`catch_up`). One segment only
(raster order), without branches.
"""

from __future__ import annotations

import torch

from mmspec.core.contracts import GuidedLogits, Rejected
from mmspec.core.layout import TokenLayout
from mmspec.core.noise import Noise
from mmspec.core.sampling import SamplingConfig, categorical, transform
from mmspec.decoding.steps import allowed_steps, as_steps, keyed_draw, step_logits


class HeadDrafter:
    """The head's state over one decoding call of `batch_size` rows (`rows` cache rows: both
    CFG halves when guided); `depth`: the most slots it drafts."""

    def __init__(self, head, session, layout: TokenLayout, sampling: SamplingConfig, noise: Noise, keyed: bool,
                 depth: int, device: torch.device):
        B, T = session.batch_size, layout.length
        self.head, self.layout, self.sampling, self.noise, self.keyed = head, layout, sampling, noise, keyed
        self.T, self.B = T, B
        session.hidden_layers = head.layers
        self.cache = head.start(B, guided=session.guided, length=T, extra_positions=T + depth)
        prefill = session.prefill_logits().hidden  # [rows, 1, D]: what predicted position 0
        self.rows = prefill.shape[0]
        self.hidden_at = prefill.new_zeros(self.rows, T + 1, prefill.shape[-1])  # what predicted each position
        self.hidden_at[:, 0] = prefill[:, 0]
        self.fed = torch.zeros(B, dtype=torch.long, device=device)  # positions before it are in the head's cache
        self.b = torch.arange(B, device=device)[:, None]
        # the draft rejected at each row's commit front and the hidden states on it (-1: none)
        self.rejected_at = torch.full((B,), -1, dtype=torch.long, device=device)
        self.rejected_token = torch.zeros(B, dtype=torch.long, device=device)
        self.rejected_hidden = prefill.new_zeros(self.rows, prefill.shape[-1])

    def both(self, x: torch.Tensor) -> torch.Tensor:
        """A per-sequence index repeated for the unconditional cache rows."""
        return torch.cat([x, x]) if self.rows > self.B else x

    def record(self, hidden: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> None:
        """Keeps `hidden [rows, n, D]`, the hidden states that predicted `positions [B, n]`,
        where `mask [B, n]` (the positions just committed)."""
        at = self.both(torch.where(mask, positions, self.T))
        self.hidden_at.scatter_(1, at[..., None].expand(-1, -1, self.hidden_at.shape[-1]), hidden[:, :at.shape[1]])

    def record_rejected(self, hidden: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> None:
        """Keeps, where `mask [B]`, the draft `tokens [B]` rejected at `positions [B]` (the new
        commit front) and the hidden states on it, `hidden [rows, D]`; forgets the rest."""
        self.rejected_at = torch.where(mask, positions, -1)
        self.rejected_token = torch.where(mask, tokens, 0)
        self.rejected_hidden = torch.where(self.both(mask)[:, None], hidden, 0.0)

    def drafts(self, tokens: torch.Tensor, front: torch.Tensor, live: torch.Tensor, current: torch.Tensor,
               attempts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Drafts `[B, slots, K]` for the positions `front .. front + slots - 1` of each row
        (`front [B]`: its first undecoded position, everything before it committed in
        `tokens [B, T, K]`), -1 past the end, for rows not `live`, and after the roll-out
        stops; under SJD / MC-SJD also their q `[B, slots, K, V]` (None when keyed).

        `current [B, slots]`: the window's drafts there now (-1: none). A roll-out goes on
        past a slot only where its new draft differs from the current one: the current
        drafts after it were made for that token, and beat a roll-out's further steps.
        `attempts [B, T + 1]`: how often each position was verified (the draft uniforms' attempt)."""
        slots = current.shape[1]
        B, T = self.B, self.T
        feature, logits = self.catch_up(tokens, front, live)
        drafts = torch.full((B, slots, 1), -1, dtype=torch.long, device=front.device)
        q = None if self.keyed else torch.zeros(B, slots, 1, self.layout.vocab_size, device=front.device)
        rolled = []
        going = live.clone()
        for k in range(slots):
            at = front + k
            ok = going & (at < T)
            draft, probs = self.draw(logits, at.clamp(max=T - 1)[:, None], attempts)
            drafts[:, k] = torch.where(ok[:, None], draft, -1)
            if q is not None:
                q[:, k] = probs
            going = ok & (draft[:, 0] != current[:, k])
            if k + 1 == slots or not bool(going.any()):
                break
            where = torch.where(going, at, T)[:, None]  # the next step reads the draft just made
            out, logits = self.cache.forward(draft.clamp(min=0), feature[:, None], where)
            self.cache.commit(where, going[:, None])
            rolled.append(where)
            feature = out[:, 0]
        for where in rolled:  # a roll-out is never context for later rounds
            self.cache.forget(where)
        return drafts, q

    def catch_up(self, tokens: torch.Tensor, front: torch.Tensor, live: torch.Tensor) -> tuple[torch.Tensor, GuidedLogits]:
        """Feeds the head the positions committed since its last round (committed to its
        cache) and returns its prediction of each row's front: the output features `[rows,
        D]` and logits `[B, 1, V]` of its input at front - 1. A head that reads rejected drafts
        gets, in the same call, that input again as a query reading the draft rejected there
        (where one was), written at a scratch slot and seeing the inputs before it and itself."""
        B, T = self.B, self.T
        old = self.fed
        pending = max(int((front - old).masked_fill(~live, 0).max()), 1)
        step = torch.arange(pending, device=front.device)
        valid = live[:, None] & (old[:, None] + step < front[:, None])
        at = torch.where(valid, old[:, None] + step, T + step)  # padding stands at scratch positions
        feed = tokens[self.b, at.clamp(max=T - 1), 0].masked_fill(~valid, 0)
        hidden = self.hidden_at.gather(1, self.both(at.clamp(max=T))[..., None].expand(-1, -1, self.hidden_at.shape[-1]))
        features = self.head.fused(hidden)
        last = (front - 1 - old).clamp(0, pending - 1)  # each row's input at front - 1: it predicts the front
        rows, cache_rows = torch.arange(B, device=front.device), torch.arange(self.rows, device=front.device)
        if not self.head.config.reads_rejected:
            out, logits = self.cache.forward(feed, features, at)
            pick = last
        else:
            here = live & (self.rejected_at == front - 1)
            n = pending + 1
            query_at = (front - 1).clamp(0, T - 1)[:, None]
            acts = torch.cat([at, query_at], 1)
            plain = torch.cat([valid, torch.zeros_like(valid[:, :1])], 1)  # [B, n]: inputs that go to the cache
            visible = plain[:, None, :] & (acts[:, None, :] <= acts[:, :, None])
            visible[:, -1] &= acts < query_at  # the query sees the plain inputs before it
            visible |= torch.eye(n, dtype=torch.bool, device=front.device)
            rejected = Rejected(
                self.both(torch.cat([torch.full_like(at, -1), torch.where(here, self.rejected_token, -1)[:, None]], 1)),
                torch.cat([torch.zeros_like(features), self.head.fused(self.rejected_hidden[:, None])], 1))
            out, logits = self.cache.forward(torch.cat([feed, feed[rows, last][:, None]], 1),
                                             torch.cat([features, features[cache_rows, self.both(last)][:, None]], 1),
                                             torch.cat([at, torch.full_like(query_at, T + pending)], 1), rejected,
                                             acts_as=acts, visible=visible)
            pick = torch.where(here, pending, last)
        self.cache.commit(at, valid)
        self.fed = torch.where(live, front, old)
        feature = out[cache_rows, self.both(pick)]  # [rows, D]
        return feature, GuidedLogits(*(None if x is None else x[rows, pick][:, None] for x in (logits.cond, logits.uncond)))

    def draw(self, logits: GuidedLogits, positions: torch.Tensor, attempts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A draft `[B, 1]` from the head's logits `[B, 1, V]` predicting `positions [B, 1]`:
        keyed, the Gumbel winner under the slot's noise; else drawn from q with the slot's
        head uniform, and q `[B, 1, V]`."""
        target = step_logits(as_steps(logits, 1), positions, self.sampling)  # [B, 1, 1, V]
        rows = torch.arange(self.B, device=positions.device)
        if self.keyed:
            return keyed_draw(target, positions, self.layout, self.sampling, self.noise, rows)[:, 0], None
        q = transform(target, self.sampling, allowed_steps(self.layout, positions))[:, 0]  # [B, 1, V]
        u = self.noise.uniform("head", rows, positions, 1, attempts.gather(1, positions))[:, 0]  # [B, 1]
        return categorical(q, u), q
