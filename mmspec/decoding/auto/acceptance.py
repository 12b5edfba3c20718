"""What auto learns from the decode itself: the tokens a window commits per forward
(`AcceptanceModel`; `RunAcceptance` for loops that redraft every window) and how often
each copy drafter auto may choose would have proposed the committed token (`DrafterHits`)."""

from __future__ import annotations

import math

import torch

from mmspec.decoding.drafts import Copy, FirstOf, Random


class AcceptanceModel:
    """Tokens a window commits per forward (its run length): E[run length | window w] = 1 + a f(w), with
    f(w) = log2(1 + w) / log2(17) the diminishing return of a longer window (Jacobi
    drafts far from the committed front rarely survive), and the scale a (what window 16
    adds) learned from every forward of the decode, whatever its window, as decaying sums
    starting from a prior `scale` worth `weight` forwards of window 16.

    One shared scale instead of a mean per window: a single image takes about a hundred
    forwards, too few to try each window long enough, and a window's forwards are
    measured as decoded with it (a longer window pays later too: its tail drafts get their
    p, and are better when they reach the front). Branches add a mean gain of their own,
    the tokens they committed beyond their window's run, from an optimistic prior."""

    def __init__(self, scale: float = 1.5, weight: float = 2.0, decay: float = 0.98, branch_prior: float = 1.0):
        self.scale, self.weight, self.decay, self.branch_prior = scale, weight, decay, branch_prior
        self.gained, self.reach = 0.0, 0.0  # sum of (run length - 1), sum of f(w)
        self.branch_sums: dict = {}

    @staticmethod
    def shape(window: int) -> float:
        return math.log2(1 + window) / math.log2(17)

    def observe(self, window: int, branches, run_tokens: float, by_branches: float, forwards: float,
                rejections: float = 0.0) -> None:
        """`forwards` forwards at `window` committed `run_tokens` tokens per window in all,
        `by_branches` of them past the windows' own runs (`rejections`: see `RunAcceptance`)."""
        d = self.decay ** forwards
        self.gained = self.gained * d + run_tokens - by_branches - forwards
        self.reach = self.reach * d + self.shape(window) * forwards
        if branches is not None:
            total = self.branch_sums.setdefault(branches, [0.0, 0.0])
            total[0], total[1] = total[0] * d + by_branches, total[1] * d + forwards

    def forget(self, forwards: float) -> None:
        """Forwards that measured nothing (AR steps): what was learnt fades towards the prior,
        so that after a stretch of AR steps a window is tried again."""
        self.observe(0, None, forwards, 0.0, forwards)  # one token a forward, f(0) = 0: decay alone

    def expected(self, window: int, branches=None) -> float:
        """E[tokens a window commits per forward] with this setting."""
        scale = (self.gained + self.scale * self.weight) / (self.reach + self.weight)
        gain = 0.0
        if branches is not None:
            total = self.branch_sums.get(branches, [0.0, 0.0])
            gain = (total[0] + self.branch_prior) / (total[1] + 1.0)
        return 1.0 + max(scale, 0.0) * self.shape(window) + gain


class RunAcceptance:
    """Tokens a redrafting window commits per forward. Redrafted drafts are fresh at every
    forward (a phrase looked up again, not a Jacobi draft refined in place), so a window's
    slot is accepted, given the slot before it was, with one rate alpha whatever its
    distance from the front: E[run length | window w] = 1 + alpha + ... + alpha^w. alpha is
    learnt as accepted drafts over drafts tried (accepted ones and the first rejected one
    of each window), in decaying sums from an optimistic prior. Phrase runs are long where
    they fit: log-shaped Jacobi acceptance would undervalue windows of 8 to 16 there."""

    def __init__(self, alpha: float = 0.75, weight: float = 4.0, decay: float = 0.98):
        self.alpha, self.weight, self.decay = alpha, weight, decay
        self.accepted, self.tried = 0.0, 0.0

    def observe(self, window: int, branches, run_tokens: float, by_branches: float, forwards: float,
                rejections: float = 0.0) -> None:
        """`forwards` forwards committed `run_tokens` tokens per window in all (each its
        accepted drafts and one token drawn), `rejections` of their windows ending at a
        rejected draft."""
        d = self.decay ** forwards
        accepted = run_tokens - by_branches - forwards
        self.accepted = self.accepted * d + accepted
        self.tried = self.tried * d + accepted + rejections

    def forget(self, forwards: float) -> None:
        """AR steps: what was learnt fades towards the prior."""
        d = self.decay ** forwards
        self.accepted, self.tried = self.accepted * d, self.tried * d

    def expected(self, window: int, branches=None) -> float:
        alpha = (self.accepted + self.alpha * self.weight) / (self.tried + self.weight)
        return sum(alpha ** j for j in range(window + 1))


class DrafterHits:
    """For each drafter auto may choose, decaying counts of committed positions whose token
    equals the one it would propose: a copy where its source was committed; random where the
    loop can say what it would have drawn (keyed decoding: the uniform distribution's Gumbel
    winner under the position's noise, which the target's winner often is)."""

    def __init__(self, drafters: tuple, layout, device, decay: float = 0.99, prompt: torch.Tensor | None = None):
        """`prompt [B, P, K]`: where the layout says it ends with frames of its grid
        (`prompt_frames`), copies of the previous frame are scored on the first frame too."""
        self.drafters, self.decay = drafters, decay
        self.prompt = prompt if layout.prompt_frames and prompt is not None else None
        P = 0 if self.prompt is None else self.prompt.shape[1]
        sources = []  # per drafter: the index of each position's source in prompt + tokens, -1 = none
        for drafter in drafters:
            axis = first_copy_axis(drafter)
            if axis is None:
                sources.append(None)
                continue
            source, back = layout.neighbour(axis).to(device), layout.prompt_source(axis).to(device)
            found = torch.where(source >= 0, P + source, -1)
            sources.append(torch.where((back > 0) & (back <= P), P - back, found) if P else found)
        self.sources = sources
        self.hits = [0.0] * len(drafters)
        self.seen = [0.0] * len(drafters)

    def observe(self, tokens: torch.Tensor, new: torch.Tensor, committed: torch.Tensor,
                at_random: torch.Tensor | None = None) -> None:
        """`tokens [B, T, K]`, positions committed since the last call `new [B, T]`, all
        committed; `at_random [B, T, K]`: what a random first draft would have been there
        (-1 where not known)."""
        if self.prompt is not None:  # the prompt's tokens are known: committed sources
            tokens = torch.cat([self.prompt.to(tokens), tokens], 1)
            committed = torch.cat([(self.prompt >= 0).all(-1).to(committed.device), committed], 1)
        P = tokens.shape[1] - new.shape[1]
        for i, (drafter, src) in enumerate(zip(self.drafters, self.sources)):
            if src is not None:
                ok = new & (src >= 0) & committed.gather(1, src.clamp(min=0).expand_as(new))
                same = (tokens[:, P:] == tokens[:, src.clamp(min=0)]).all(-1) & ok
            elif isinstance(drafter, Random) and at_random is not None:
                ok = new & (at_random >= 0).all(-1)
                same = (tokens[:, P:] == at_random).all(-1) & ok
            else:
                continue
            seen, hit = torch.stack([ok.sum(), same.sum()]).tolist()
            self.seen[i] = self.seen[i] * self.decay + seen
            self.hits[i] = self.hits[i] * self.decay + hit

    def best(self):
        """The drafter with the highest hit rate (random, where no copy has hit)."""
        rates = [h / s if s else 0.0 for h, s in zip(self.hits, self.seen)]
        return self.drafters[max(range(len(rates)), key=lambda i: (rates[i], -i))]  # ties: the first, a copy


def first_copy_axis(drafter) -> str | None:
    if isinstance(drafter, Copy):
        return drafter.axis
    if isinstance(drafter, FirstOf) and isinstance(drafter.drafters[0], Copy):
        return drafter.drafters[0].axis
    return None


