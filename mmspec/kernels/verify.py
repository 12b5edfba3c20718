"""`verify`: the one entry point for probabilistic Jacobi verification.

Checks shapes, dtypes and devices with clear errors, then runs the PyTorch reference
(`verify_reference`). See `verify_reference.py` for what is computed.
"""

from __future__ import annotations

import torch

from mmspec.decoding.rules import ExactRule
from mmspec.kernels.verify_reference import verify_reference
from mmspec.kernels.verify_types import VerifyOutput


def check_verify_inputs(target_probs, draft_probs, draft_tokens, num_slots, accept_uniforms, sample_uniforms) -> None:
    if target_probs.dim() != 3:
        raise ValueError(f"target_probs must be [N, S, V], got {tuple(target_probs.shape)}")
    N, S, V = target_probs.shape
    if S == 0:
        raise ValueError("verify needs at least one slot per window (S = 0)")
    if draft_probs.shape != target_probs.shape:
        raise ValueError(f"draft_probs {tuple(draft_probs.shape)} must match target_probs {tuple(target_probs.shape)}")
    for name, t in (("draft_tokens", draft_tokens), ("accept_uniforms", accept_uniforms), ("sample_uniforms", sample_uniforms)):
        if t.shape != (N, S):
            raise ValueError(f"{name} must be [{N}, {S}], got {tuple(t.shape)}")
    if num_slots.shape != (N,):
        raise ValueError(f"num_slots must be [{N}], got {tuple(num_slots.shape)}")
    if draft_tokens.dtype != torch.long or num_slots.dtype != torch.long:
        raise ValueError("draft_tokens and num_slots must be torch.long")
    if accept_uniforms.dtype != torch.float64 or sample_uniforms.dtype != torch.float64:
        raise ValueError("uniforms must be float64 (a float32 uniform can round to 1.0)")
    if draft_tokens.numel() and int(draft_tokens.max()) >= V:
        raise ValueError(f"draft_tokens must be < V = {V}")
    devices = {t.device for t in (target_probs, draft_probs, draft_tokens, num_slots, accept_uniforms, sample_uniforms)}
    if len(devices) > 1:
        raise ValueError(f"verify inputs are on different devices: {sorted(map(str, devices))}")


def verify(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    num_slots: torch.Tensor,
    accept_uniforms: torch.Tensor,
    sample_uniforms: torch.Tensor,
    rule=ExactRule(),
    coupling: bool = True,
) -> VerifyOutput:
    """Verifies N windows of drafts against their target distributions.

    Args:
        target_probs (`torch.Tensor`): `[N, S, V]`, p of every slot (after the sampling transform).
        draft_probs (`torch.Tensor`): `[N, S, V]`, q every draft was drawn from.
        draft_tokens (`torch.Tensor`): long `[N, S]`, the drafts; -1 where a slot has none.
        num_slots (`torch.Tensor`): long `[N]`, how many leading slots have a p.
        accept_uniforms, sample_uniforms (`torch.Tensor`): float64 `[N, S]` in [0, 1).
        rule: `ExactRule()`, `LanternRule(...)` or `GSDRule(...)`, bound to the embeddings.
        coupling (`bool`): MC-SJD's maximal coupling for the next drafts (else fresh samples).

    Example:
        >>> import torch
        >>> p = torch.tensor([[[0.5, 0.5], [0.9, 0.1]]])
        >>> out = verify(p, p.clone(), torch.tensor([[1, -1]]), torch.tensor([2]),
        ...              torch.zeros(1, 2, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64))
        >>> out.accepted.tolist(), out.committed.tolist(), out.tokens.tolist()
        ([1], [2], [[1, 0]])
    """
    check_verify_inputs(target_probs, draft_probs, draft_tokens, num_slots, accept_uniforms, sample_uniforms)
    return verify_reference(target_probs, draft_probs, draft_tokens, num_slots, accept_uniforms, sample_uniforms, rule, coupling)
