"""Keyed verification: the Jacobi fixed-point test under position-keyed Gumbel noise, in
plain PyTorch (the oracle, and the path off CUDA).

Slot j of a window holds the scores of its position n + j (the transformed logits of
`mmspec.core.sampling.transformed_scores`) and a draft d_j. The token of position n + j is
its Gumbel winner w_j = argmax(scores_j + g(key, row, n + j)), a function of the row's key
and the distribution there: the token AR draws with the same key. w_j is final once every
draft before it equals its winner, because the scores of slot j were computed after those
drafts. So a window commits its leading slots with d_j == w_j and the first slot after them,
and every later slot's winner is its next draft (the Jacobi update). Drafts are point
masses: nothing is carried but the tokens, and no draft, however bad, changes a committed
token; it only costs forwards.

`ranked` > 0 also returns each slot's `ranked` best tokens by perturbed score (best first:
the winner, then the runners-up), for branches: the list-sampling candidates of a slot
(Rowan, Phan, Khisti, arXiv 2506.05632).
"""

from __future__ import annotations

import torch

from mmspec.core.noise import Noise
from mmspec.core.sampling import SamplingConfig, keyed_scores
from mmspec.kernels.verify_types import VerifyOutput


def verify_keyed_reference(
    target_logits: torch.Tensor,  # [N, S, V] or [N, S, K, V] float32, CFG combined
    draft_tokens: torch.Tensor,  # [N, S] or [N, S, K] long, -1 = no draft
    num_slots: torch.Tensor,  # [N] long, slots that have a p
    *,
    noise: Noise,
    rows: torch.Tensor,  # [N] long: each window's batch row (its key)
    positions: torch.Tensor,  # [N, S] long: the position each slot predicts
    sampling: SamplingConfig = SamplingConfig(),
    allowed: torch.Tensor | None = None,  # like the target, bool
    ranked: int = 0,
) -> VerifyOutput:
    one_token = draft_tokens.dim() == 2
    if one_token:
        target_logits, draft_tokens = target_logits[:, :, None], draft_tokens[..., None]
        allowed = None if allowed is None else allowed[:, :, None]
    scores, columns = keyed_scores(target_logits.float(), sampling, allowed)
    filtered = allowed is not None or sampling.top_k > 0 or sampling.top_p < 1
    top = noise.top(scores, rows, positions, max(ranked, 1), greedy=sampling.temperature == 0, filtered=filtered,
                    tokens=columns)  # [N, S, K, m]
    winners = top[..., 0]
    S = scores.shape[1]
    has_p = torch.arange(S, device=scores.device)[None, :] < num_slots[:, None]
    match = has_p & (draft_tokens == winners).all(-1)
    accepted = match.long().cumprod(-1).sum(-1)
    run_length = accepted + (accepted < num_slots).long()
    tokens = torch.where(has_p[..., None], winners, draft_tokens)
    if one_token:
        tokens, top = tokens[..., 0], top[:, :, 0]
    return VerifyOutput(accepted=accepted, run_length=run_length, tokens=tokens, target_probs=None,
                        ranked=top if ranked else None)


def rank_scores(ranked: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """float32 `[..., V]` scores that order each slot's `ranked [..., m]` tokens as given
    (m for the best, down to 1) and leave every other token at 0: the draft-q stand-in the
    branch candidates read under keyed verification (their top tokens, by perturbed score).
    A -1 (fewer allowed tokens than m, from the allowed-columns draw) ranks nothing."""
    m = ranked.shape[-1]
    weights = torch.arange(m, 0, -1, dtype=torch.float32, device=ranked.device).expand(ranked.shape)
    scores = torch.zeros(*ranked.shape[:-1], vocab_size + 1, device=ranked.device)
    return scores.scatter_(-1, torch.where(ranked < 0, vocab_size, ranked), weights)[..., :vocab_size]
