"""Acceptance rules: with what probability a Jacobi draft d is accepted against p.

Every rule maps the target p `[N, S, V]`, the draft distribution q `[N, S, V]` and the
drafts d `[N, S]` to an acceptance probability `[N, S]`; verification accepts slot i when
a uniform u_i falls below it and otherwise resamples from norm((p - q)+), whatever the
rule. Only `ExactRule` keeps the output distribution equal to p; the relaxed rules trade
a bounded (LANTERN) or grouped (GSD) change of it for longer accepted runs, and say so
through `exact = False`.

The relaxed rules never accept a draft the sampling transform excludes (p(d) = 0, e.g.
outside top-k): the papers' rules would, since a group or neighbourhood can carry mass
that d itself has not.

Rules that look at token neighbourhoods need the layout's token embeddings (VQ codebook
vectors); `bind(embeddings, allowed)` returns a copy holding the precomputed tables. A rule
may also define `residual_draft(p, q)`, the q whose residual norm((p - q)+) a rejected slot
is drawn from (PCG's group residual); MC-SJD's next drafts always use the token residual,
which keeps their marginal p.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field, replace

import torch


def gather_last(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """`x[..., index]` per leading position: x `[N, S, V]`, index `[N, S]` -> `[N, S]`."""
    return x.gather(-1, index[..., None])[..., 0]


@dataclass(frozen=True)
class ExactRule:
    """Speculative sampling (Leviathan et al.; SJD):

        accept d  iff  u < min(1, p(d) / q(d))

    Lossless: the committed token is distributed exactly as p.
    """

    exact = True
    name = "exact"

    def bind(self, embeddings: torch.Tensor | None, allowed: torch.Tensor | None = None) -> "ExactRule":
        return self

    def accept_prob(self, p: torch.Tensor, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        p_d, q_d = gather_last(p, d), gather_last(q, d)
        return torch.where(q_d > 0, p_d / q_d.clamp(min=1e-30), torch.zeros_like(p_d)).clamp(max=1.0)


def nearest_neighbours(embeddings: torch.Tensor, k: int, candidates: torch.Tensor | None = None, chunk: int = 4096) -> torch.Tensor:
    """Long `[V, k]`: for each token the k nearest other tokens by L2 distance, nearest first.

    With `candidates` (bool `[V]`, e.g. the visual tokens of a model that also speaks
    text), neighbours are searched among the candidates alone, which is also all the
    distance computation done (C^2, not V^2). Rows of the other tokens then hold the
    first k candidates: such tokens are only ever drafted where they are forced, and p is
    one-hot there, so their neighbours carry no mass.
    """
    ids = torch.arange(embeddings.shape[0], device=embeddings.device)
    if candidates is not None:
        ids = ids[candidates.to(embeddings.device)]
    C = len(ids)
    k = min(k, C - 1)
    e = embeddings.float()[ids]
    table = ids[:k].expand(embeddings.shape[0], k).clone()
    for start in range(0, C, chunk):
        d = torch.cdist(e[start : start + chunk], e)  # [chunk, C]
        rows = torch.arange(start, min(start + chunk, C), device=e.device)
        d[rows - start, rows] = float("inf")  # never one's own neighbour
        table[ids[rows]] = ids[d.topk(k, dim=-1, largest=False).indices]
    return table


def by_token(table: torch.Tensor, ids: torch.Tensor, trailing: int = 0, per_codebook: bool = False) -> torch.Tensor:
    """`table[ids]` for a table with a row per token, `[V, ...]`; with `per_codebook` the
    table is `[K, V, ...]` (steps of K codebooks, as a codec's) and each id, on the axis of
    its codebook `trailing` axes before the end of `ids`, reads its own codebook's row."""
    if not per_codebook:
        return table[ids]
    book = torch.arange(table.shape[0], device=ids.device).view(-1, *([1] * trailing))
    return table[book, ids]


@dataclass(frozen=True)
class LanternRule:
    """LANTERN relaxed acceptance (Jang et al. 2025) over latent neighbourhoods.

    With n_1..n_k the k nearest codebook neighbours of d and c_j = sum_{l<=j} p(n_l):

        p~(d) = p(d) + max{ c_j : c_j <= bound },   accept d  iff  u < min(1, p~(d) / q(d))

    `bound` is `delta` (LANTERN: total variation between p and p~ stays within delta) or
    `(lam - 1) * p(d)` (LANTERN++'s lambda form: p~(d) <= lam * p(d)). Give exactly one.
    Defaults are the authors' (`generate_images.py`: k=1000, delta=0.1). With a codebook
    per token of a step (embeddings `[K, V, E]`), neighbours are searched in each codebook.
    """

    k: int = 1000
    delta: float | None = 0.1
    lam: float | None = None
    neighbours: torch.Tensor | None = field(default=None, repr=False, compare=False)  # [V, k], or [K, V, k]

    exact = False
    name = "lantern"

    def __post_init__(self):
        if (self.delta is None) == (self.lam is None):
            raise ValueError("LanternRule takes exactly one of delta (total-variation budget) and lam (LANTERN++ ratio)")
        if self.k < 1:
            raise ValueError(f"LANTERN neighbourhood size k must be >= 1, got {self.k}")
        if self.delta is not None and not 0 <= self.delta <= 1:
            raise ValueError(f"LANTERN delta must lie in [0, 1], got {self.delta}")
        if self.lam is not None and self.lam < 1:
            raise ValueError(f"LANTERN++ lam must be >= 1, got {self.lam}")

    def bind(self, embeddings: torch.Tensor | None, allowed: torch.Tensor | None = None) -> "LanternRule":
        """Precomputes the neighbour table among the `allowed` tokens (bool `[V]`, or
        `[T, V]` per position: their union), or all tokens when None."""
        if embeddings is None:
            raise ValueError("LANTERN needs token embeddings (the VQ codebook) in the layout; this model's layout has none")
        candidates = allowed if allowed is None or allowed.dim() == 1 else allowed.any(0)
        if embeddings.dim() == 3:  # [K, V, E]: one codebook per token of a step
            return replace(self, neighbours=torch.stack([nearest_neighbours(e, self.k, candidates) for e in embeddings]))
        return replace(self, neighbours=nearest_neighbours(embeddings, self.k, candidates))

    def accept_prob(self, p: torch.Tensor, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        if self.neighbours is None:
            raise ValueError("bind(embeddings) the LANTERN rule before use")
        table = self.neighbours.to(p.device)
        nbrs = by_token(table, d, per_codebook=table.dim() == 3)  # [N, S, (K,) k]
        cum = p.gather(-1, nbrs).cumsum(-1)  # [N, S, k]
        p_d, q_d = gather_last(p, d), gather_last(q, d)
        bound = torch.full_like(p_d, self.delta) if self.delta is not None else (self.lam - 1) * p_d
        boost = torch.where(cum <= bound[..., None], cum, torch.zeros_like(cum)).amax(-1)
        ratio = (p_d + boost) / q_d.clamp(min=1e-30)
        return torch.where((q_d > 0) & (p_d > 0), ratio, torch.zeros_like(ratio)).clamp(max=1.0)


@dataclass(frozen=True)
class GSDRule:
    """Grouped Speculative Decoding (So et al. 2025) acceptance.

    The group G(d) holds the tokens ranked within `rank_window` places of d in p's own
    ranking (`[rank(d) - w, rank(d) + w)`, as the authors' code), whose probability is
    within `prob_gap` of p(d) and whose embedding is within squared L2 distance
    `embed_dist` of d's:

        accept d  iff  u < min(1, p(G) / q(G))

    and d itself is committed. Defaults are the authors' (rank half-width 7, probability
    gap 0.15, embedding distance 0.5). With a codebook per token of a step (embeddings
    `[K, V, E]`), distances are taken in each token's codebook.
    """

    rank_window: int = 7
    prob_gap: float = 0.15
    embed_dist: float = 0.5
    embeddings: torch.Tensor | None = field(default=None, repr=False, compare=False)  # [V, E], or [K, V, E]

    exact = False
    name = "gsd"

    def __post_init__(self):
        if self.rank_window < 1:
            raise ValueError(f"GSD rank_window must be >= 1, got {self.rank_window}")
        if self.prob_gap < 0 or self.embed_dist < 0:
            raise ValueError(f"GSD prob_gap and embed_dist must be >= 0, got {self.prob_gap}, {self.embed_dist}")

    def bind(self, embeddings: torch.Tensor | None, allowed: torch.Tensor | None = None) -> "GSDRule":
        if embeddings is None:
            raise ValueError("GSD needs token embeddings (the VQ codebook) in the layout; this model's layout has none")
        return replace(self, embeddings=embeddings.float())

    def accept_prob(self, p: torch.Tensor, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        if self.embeddings is None:
            raise ValueError("bind(embeddings) the GSD rule before use")
        V = p.shape[-1]
        order = p.argsort(dim=-1, descending=True, stable=True)  # [N, S, V] ids by rank
        rank_of = order.argsort(dim=-1)  # [N, S, V] rank of each id
        r = gather_last(rank_of, d)  # [N, S]
        offsets = torch.arange(-self.rank_window, self.rank_window, device=p.device)
        ranks = r[..., None] + offsets  # [N, S, 2w]
        in_range = (ranks >= 0) & (ranks < V)
        ids = order.gather(-1, ranks.clamp(0, V - 1))  # [N, S, 2w]
        p_g, q_g = p.gather(-1, ids), q.gather(-1, ids)
        emb = self.embeddings.to(p.device)
        books = emb.dim() == 3
        dist = (by_token(emb, ids, 1, books) - by_token(emb, d, 0, books)[..., None, :]).pow(2).sum(-1)  # [N, S, (K,) 2w]
        p_d = gather_last(p, d)
        member = in_range & ((p_g - p_d[..., None]).abs() < self.prob_gap) & (dist < self.embed_dist)
        p_group = (p_g * member).sum(-1)
        q_group = (q_g * member).sum(-1)
        ratio = p_group / q_group.clamp(min=1e-30)
        return torch.where((q_group > 0) & (p_d > 0), ratio, torch.zeros_like(ratio)).clamp(max=1.0)


def kmeans_groups(embeddings: torch.Tensor, groups: int, iterations: int = 25) -> torch.Tensor:
    """Long `[V]`: a group id per row of `embeddings [V, E]` by Lloyd's k-means, started
    from evenly spaced rows (deterministic: no random draw outside the caller's generator).
    A group that loses all its members keeps its centre."""
    e = embeddings.float()
    V = e.shape[0]
    groups = min(groups, V)
    centres = e[torch.linspace(0, V - 1, groups, device=e.device).round().long()].clone()
    for _ in range(iterations):
        assign = torch.cdist(e, centres).argmin(-1)
        sums = torch.zeros_like(centres).index_add_(0, assign, e)
        counts = torch.bincount(assign, minlength=groups).float()
        centres = torch.where(counts[:, None] > 0, sums / counts.clamp(min=1)[:, None], centres)
    return torch.cdist(e, centres).argmin(-1)


@dataclass(frozen=True)
class PCGRule:
    """Grouped acceptance for codec tokens, after PCG (principled coarse-grained acceptance
    for speech): the codes of a codebook are partitioned into `groups` of acoustically
    similar ones (k-means of the codebook vectors), and rejection sampling runs on the
    group variable. With P(G) and Q(G) the masses of p and q on d's group G (q counted
    only where p > 0, so that no token the sampling transform excludes is committed):

        accept d  iff  u < min(1, P(G) / Q(G));  on rejection draw a group from
        norm((P - Q)+), then a token from p within it.

    Guarantee: the committed token's group is distributed exactly as P, given the past
    (exact at the group level). Within its group an accepted draft keeps its own
    distribution, so the token is not distributed as p: the rule is relaxed.
    """

    groups: int = 32
    group_of: torch.Tensor | None = field(default=None, repr=False, compare=False)  # [V], or [K, V] per codebook

    exact = False
    name = "pcg"

    def __post_init__(self):
        if self.groups < 1:
            raise ValueError(f"PCG groups must be >= 1, got {self.groups}")

    def bind(self, embeddings: torch.Tensor | None, allowed: torch.Tensor | None = None) -> "PCGRule":
        """Groups the codes of `embeddings` (`[V, E]`, or `[K, V, E]`: one codebook per
        token of a step)."""
        if embeddings is None:
            raise ValueError("PCG needs token embeddings (the codec's codebook vectors) in the layout; this model's layout has none")
        if embeddings.dim() == 3:
            return replace(self, group_of=torch.stack([kmeans_groups(e, self.groups) for e in embeddings]))
        return replace(self, group_of=kmeans_groups(embeddings, self.groups))

    def group_mass(self, x: torch.Tensor) -> torch.Tensor:
        """`[..., V]` (`[..., K, V]` with per-codebook groups) -> each token's group mass."""
        if self.group_of is None:
            raise ValueError("bind(embeddings) the PCG rule before use")
        index = self.group_of.to(x.device).expand_as(x)
        mass = torch.zeros(*x.shape[:-1], self.groups, dtype=x.dtype, device=x.device).scatter_add_(-1, index, x)
        return mass.gather(-1, index)

    def accept_prob(self, p: torch.Tensor, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        p_group, q_group = self.group_mass(p), self.group_mass(q * (p > 0))
        p_d = gather_last(p, d)
        ratio = gather_last(p_group, d) / gather_last(q_group, d).clamp(min=1e-30)
        return torch.where((gather_last(q_group, d) > 0) & (p_d > 0), ratio, torch.zeros_like(ratio)).clamp(max=1.0)

    def residual_draft(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """The q' whose token residual norm((p - q')+) is the group residual above:
        q'(x) = p(x) min(1, Q(G)/P(G)), so (p - q')+ = p(x)/P(G) (P(G) - Q(G))+."""
        p_group, q_group = self.group_mass(p), self.group_mass(q * (p > 0))
        return p * (q_group / p_group.clamp(min=1e-30)).clamp(max=1.0)


RULES = {"exact": ExactRule, "lantern": LanternRule, "gsd": GSDRule, "pcg": PCGRule}


_BOUND: OrderedDict = OrderedDict()  # (rule, digests) -> bound rule, the few most recent


def digest(t: torch.Tensor | None) -> str | None:
    if t is None:
        return None
    data = t.detach().float().cpu().contiguous().numpy().tobytes() if t.dtype != torch.bool else t.cpu().numpy().tobytes()
    return hashlib.blake2b(data + str(tuple(t.shape)).encode(), digest_size=16).hexdigest()


def bind_cached(rule, embeddings: torch.Tensor | None, allowed: torch.Tensor | None = None, capacity: int = 8):
    """`rule.bind(embeddings, allowed)`, computed once per content of the tables: LANTERN's
    neighbour search is quadratic in the codebook (32,768 codes for Emu3), and a layout is
    rebuilt on every pipeline call."""
    if rule.exact:
        return rule.bind(embeddings, allowed)
    key = (rule, digest(embeddings), digest(allowed))
    if key not in _BOUND:
        _BOUND[key] = rule.bind(embeddings, allowed)
        while len(_BOUND) > capacity:
            _BOUND.popitem(last=False)
    _BOUND.move_to_end(key)
    return _BOUND[key]
