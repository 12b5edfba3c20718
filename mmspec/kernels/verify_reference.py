"""Probabilistic Jacobi verification in plain PyTorch: the oracle, and the CPU path.

One call verifies N windows at once. Slot i of a window holds the target distribution
p_i for its position, and optionally a draft d_i drawn from q_i:

1. accept slots left to right while u_i < rule.accept_prob(p_i, q_i, d_i); the first
   slot that is rejected, or that has a p but no draft, is drawn from norm((p_i - q_i)+)
   (from p_i when it has no draft) and ends the committed run;
2. every later slot with a p gets its next draft: a fresh sample from p_i (SJD), or the
   maximal coupling of q_i and p_i (MC-SJD: keep d_i when u_i < min(1, p_i(d_i)/q_i(d_i)),
   else draw from the residual), whose marginal is p_i whatever the rule.

Slots of K tokens (`[N, S, K, V]` targets, the codebooks of an audio frame) are accepted
when all K drafts are; given the past the K tokens are independent, so each is tested
against its own p and q, and the slot that ends the run keeps its accepted tokens and
redraws the rejected ones from their residuals.

Randomness comes in as float64 uniforms, two per slot (`accept_uniforms` for tests,
`sample_uniforms` for draws), so that every implementation fed the same numbers makes the
same decisions. Given logits instead of p, the reference runs the functions of
`mmspec.core.sampling` first: it is the oracle of the fused transform too.
"""

from __future__ import annotations

import torch

from mmspec.core.rules import ExactRule
from mmspec.core.sampling import SamplingConfig, categorical, transform
from mmspec.kernels.verify_types import VERIFY_DOC, VerifyOutput


def verify_reference(
    target_probs: torch.Tensor | None,  # [N, S, V] (or [N, S, K, V]) p per slot (rows past num_slots are ignored)
    draft_probs: torch.Tensor | None,  # like the target: q per slot (ignored where there is no draft); None = one-hot
    draft_tokens: torch.Tensor,  # [N, S] (or [N, S, K]) long, -1 = no draft
    num_slots: torch.Tensor,  # [N] long, slots that have a p
    accept_uniforms: torch.Tensor,  # like draft_tokens, float64
    sample_uniforms: torch.Tensor,  # like draft_tokens, float64
    *,
    target_logits: torch.Tensor | None = None,  # like the target
    sampling: SamplingConfig = SamplingConfig(),
    allowed: torch.Tensor | None = None,  # like the target, bool
    rule=ExactRule(),
    coupling: bool = True,
) -> VerifyOutput:
    if target_logits is not None:
        target_probs = transform(target_logits, sampling, allowed)
    one_token = draft_tokens.dim() == 2  # slots of one token: seen as K = 1
    if one_token:
        target_probs, draft_tokens = target_probs[:, :, None], draft_tokens[..., None]
        accept_uniforms, sample_uniforms = accept_uniforms[..., None], sample_uniforms[..., None]
        draft_probs = None if draft_probs is None else draft_probs[:, :, None]
    N, S, K, V = target_probs.shape
    slot = torch.arange(S, device=target_probs.device)
    has_p = slot[None, :] < num_slots[:, None]  # [N, S]
    has_draft = has_p[..., None] & (draft_tokens >= 0)  # [N, S, K]
    d = draft_tokens.clamp(min=0)
    p = target_probs.float()
    if draft_probs is None:
        draft_probs = torch.nn.functional.one_hot(d, V)
    q = draft_probs.float() * has_draft[..., None]  # no draft: q = 0, so the residual is p

    # 1. the committed run: leading slots whose K drafts are all accepted, then one drawn slot
    accept = has_draft & (accept_uniforms < rule.accept_prob(p, q, d).double())  # [N, S, K]
    accepted = accept.all(-1).long().cumprod(-1).sum(-1)  # [N]
    run_length = accepted + (accepted < num_slots).long()

    residual = (p - q).clamp(min=0)
    # p == q up to rounding leaves no residual mass; rejection then had probability ~0
    residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p)
    drawn = categorical(residual, sample_uniforms)
    if coupling and type(rule) is ExactRule:
        # the run's drafts, the slot that ends it and the next drafts after it all keep an
        # accepted draft and otherwise take the residual draw
        tokens = torch.where(accept, d, drawn)
    else:
        tokens = run_and_next_drafts(p, q, d, accept, accepted, drawn, sample_uniforms, accept_uniforms, has_draft, rule, coupling)
    tokens = torch.where(has_p[..., None], tokens, draft_tokens)
    if one_token:
        tokens, p = tokens[..., 0], p[:, :, 0]
    return VerifyOutput(accepted=accepted, run_length=run_length, tokens=tokens, target_probs=p)


def run_and_next_drafts(p, q, d, accept, accepted, drawn, sample_uniforms, accept_uniforms, has_draft, rule, coupling):
    """The tokens of every slot `[N, S, K]`: accepted drafts, the slot that ends the run,
    and the next drafts after it."""
    # the slot that ends the run keeps its accepted tokens and redraws the rejected ones
    # (given the past, the K tokens of a slot are independent), from the rule's own
    # residual when it has one (PCG's group residual)
    if hasattr(rule, "residual_draft"):
        rule_residual = (p - rule.residual_draft(p, q)).clamp(min=0)
        ending_draw = categorical(torch.where(rule_residual.sum(-1, keepdim=True) > 0, rule_residual, p), sample_uniforms)
    else:
        ending_draw = drawn
    ending = torch.where(accept, d, ending_draw)
    if coupling:  # MC-SJD: the maximal coupling of q and p, whose marginal is p whatever the rule
        keep = has_draft & (accept_uniforms < ExactRule().accept_prob(p, q, d).double())
        later = torch.where(keep, d, drawn)
    else:
        later = categorical(p, sample_uniforms)
    slot = torch.arange(p.shape[1], device=p.device)
    before = (slot[None, :] < accepted[:, None])[..., None]
    at = (slot[None, :] == accepted[:, None])[..., None]
    return torch.where(before, d, torch.where(at, ending, later))


verify_reference.__doc__ = VERIFY_DOC
