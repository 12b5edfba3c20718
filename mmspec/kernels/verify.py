"""`verify`: the one entry point for probabilistic Jacobi verification.

Checks shapes, dtypes and devices with clear errors, then runs the Triton kernel
(`verify_triton`) where the call's device profile (`mmspec.core.device`) verifies by Triton
(CUDA) and the kernel covers the rule, and the PyTorch reference (`verify_reference`, the
oracle) everywhere else. See `verify_reference.py` for what is computed. `verify_keyed`
does the same for keyed verification (`verify_keyed.py`).
"""

from __future__ import annotations

import torch

from mmspec.core.device import DeviceProfile, device_profile
from mmspec.core.noise import Noise, SlotNoise
from mmspec.core.rules import ExactRule
from mmspec.core.sampling import SamplingConfig
from mmspec.kernels.verify_joint import verify_joint
from mmspec.kernels.verify_keyed import verify_keyed_reference
from mmspec.kernels.verify_reference import verify_reference
from mmspec.kernels.verify_types import VERIFY_DOC, VerifyOutput, check_rule


def kernel_applies(profile: DeviceProfile, rule) -> bool:
    """Whether the Triton kernel verifies this call: a profile that verifies by Triton, and a
    rule whose rejected slots draw from the token residual (the kernel draws no other)."""
    return profile.triton and not hasattr(rule, "residual_draft")


def check_sampling_inputs(target_probs, target_logits, sampling: SamplingConfig, allowed) -> tuple[str, torch.Tensor]:
    """Returns the target's name and tensor (probs or logits) after checking the transform's arguments."""
    if (target_probs is None) == (target_logits is None):
        raise ValueError("give exactly one of target_probs and target_logits")
    target = target_probs if target_logits is None else target_logits
    name = "target_probs" if target_logits is None else "target_logits"
    if target.dim() != 3:
        raise ValueError(f"{name} must be [N, S, V] (or [N, S, K, V] for K tokens per slot), got {tuple(target.shape)}")
    if target.dtype != torch.float32:
        raise ValueError(f"{name} must be float32, got {target.dtype}; cast with .float()")
    if not isinstance(sampling, SamplingConfig):
        raise ValueError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
    position_only = (sampling.temperature, sampling.top_k, sampling.top_p) != (1.0, 0, 1.0)
    if target_probs is not None and (position_only or allowed is not None):
        raise ValueError("sampling and allowed transform target_logits; target_probs are used as given")
    if allowed is not None:
        if allowed.shape != target.shape or allowed.dtype != torch.bool:
            raise ValueError(f"allowed must be bool {tuple(target.shape)}, got {allowed.dtype} {tuple(allowed.shape)}")
        if not bool(allowed.any(-1).all()):
            raise ValueError("allowed must allow at least one token in every [n, s] row")
    return name, target


def check_verify_inputs(name, target, draft_probs, draft_tokens, num_slots, accept_uniforms, sample_uniforms, rule, allowed) -> None:
    N, S, V = target.shape
    if S == 0:
        raise ValueError("verify needs at least one slot per window (S = 0)")
    if draft_probs is not None:
        if draft_probs.shape != target.shape:
            raise ValueError(f"draft_probs {tuple(draft_probs.shape)} must match {name} {tuple(target.shape)}")
        if draft_probs.dtype != torch.float32:
            raise ValueError(f"draft_probs must be float32, got {draft_probs.dtype}; cast with .float()")
    for arg, t in (("draft_tokens", draft_tokens), ("accept_uniforms", accept_uniforms), ("sample_uniforms", sample_uniforms)):
        if t.shape != (N, S):
            raise ValueError(f"{arg} must be [{N}, {S}], got {tuple(t.shape)}")
    if num_slots.shape != (N,):
        raise ValueError(f"num_slots must be [{N}], got {tuple(num_slots.shape)}")
    if draft_tokens.dtype != torch.long or num_slots.dtype != torch.long:
        raise ValueError("draft_tokens and num_slots must be torch.long")
    if accept_uniforms.dtype != torch.float64 or sample_uniforms.dtype != torch.float64:
        raise ValueError("uniforms must be float64 (a float32 uniform can round to 1.0)")
    if draft_tokens.numel() and int(draft_tokens.max()) >= V:
        raise ValueError(f"draft_tokens must be < V = {V}")
    check_rule(rule, V)
    tensors = (target, draft_probs, draft_tokens, num_slots, accept_uniforms, sample_uniforms, allowed)
    devices = {t.device for t in tensors if t is not None}
    if len(devices) > 1:
        raise ValueError(f"verify inputs are on different devices: {sorted(map(str, devices))}")


def verify(
    target_probs: torch.Tensor | None,  # [N, S, V] or [N, S, K, V]
    draft_probs: torch.Tensor | None,  # like the target
    draft_tokens: torch.Tensor,  # [N, S] or [N, S, K]
    num_slots: torch.Tensor,  # [N]
    accept_uniforms: torch.Tensor,  # like draft_tokens
    sample_uniforms: torch.Tensor,  # like draft_tokens
    *,
    target_logits: torch.Tensor | None = None,  # like the target
    sampling: SamplingConfig = SamplingConfig(),
    allowed: torch.Tensor | None = None,  # like the target, bool
    rule=ExactRule(),
    coupling: bool = True,
    step_groups: tuple[tuple[int, ...], ...] | None = None,
    residual_noise: SlotNoise | None = None,
    check: bool = True,  # False: the caller built the inputs to this contract (the engine's loop)
    profile: DeviceProfile | None = None,  # the call's; None: the profile of the draft tokens' device
) -> VerifyOutput:
    target = target_probs if target_logits is None else target_logits
    profile = device_profile(draft_tokens.device if profile is None else profile)
    if target is not None and target.dim() == 4 and target.shape[2] == 1 and kernel_applies(profile, rule):  # one token per slot
        one = lambda t: None if t is None else t[:, :, 0]
        out = verify(one(target_probs), one(draft_probs), one(draft_tokens), num_slots, one(accept_uniforms),
                     one(sample_uniforms), target_logits=one(target_logits), sampling=sampling, allowed=one(allowed),
                     rule=rule, coupling=coupling, check=check, profile=profile)
        return VerifyOutput(out.accepted, out.run_length, out.tokens[..., None], out.target_probs[:, :, None])
    if target is not None and target.dim() == 4:  # K tokens per slot: the PyTorch path
        return verify_steps(target_probs, draft_probs, draft_tokens, num_slots, accept_uniforms, sample_uniforms,
                            target_logits=target_logits, sampling=sampling, allowed=allowed, rule=rule, coupling=coupling,
                            step_groups=step_groups, residual_noise=residual_noise, check=check)
    if check:
        name, target = check_sampling_inputs(target_probs, target_logits, sampling, allowed)
        check_verify_inputs(name, target, draft_probs, draft_tokens, num_slots, accept_uniforms, sample_uniforms, rule, allowed)
    if not kernel_applies(profile, rule):
        return verify_reference(target_probs, draft_probs, draft_tokens, num_slots, accept_uniforms, sample_uniforms,
                                target_logits=target_logits, sampling=sampling, allowed=allowed, rule=rule, coupling=coupling)
    from mmspec.kernels.verify_triton import verify_triton  # imports Triton on the first call that runs it

    # the kernel reads rows by stride: a caller's slices (the loop's windows cut short) are copied
    dense = lambda t: None if t is None else t.contiguous()
    return verify_triton(dense(target_probs), dense(draft_probs), dense(draft_tokens), dense(num_slots), dense(accept_uniforms),
                         dense(sample_uniforms), target_logits=dense(target_logits), sampling=sampling, allowed=dense(allowed),
                         rule=rule, coupling=coupling)


def verify_steps(target_probs, draft_probs, draft_tokens, num_slots, accept_uniforms, sample_uniforms, *,
                 target_logits, sampling, allowed, rule, coupling, step_groups, residual_noise, check) -> VerifyOutput:
    """`verify` for slots of K tokens (`[N, S, K, V]` targets): checked as K = 1 slots, run
    by the PyTorch reference (the kernel verifies one token per slot), or with `step_groups`
    and the exact rule by `verify_joint`, which tests each group of a slot's tokens as one."""
    target = target_probs if target_logits is None else target_logits
    N, S, K, V = target.shape
    flat = lambda t: None if t is None else t.transpose(1, 2).reshape(N * K, S, *t.shape[3:])
    if check:
        name, flat_target = check_sampling_inputs(flat(target_probs) if target_logits is None else None, flat(target_logits),
                                                  sampling, flat(allowed))
        if draft_tokens.shape != (N, S, K):
            raise ValueError(f"draft_tokens must be [{N}, {S}, {K}] for a [N, S, K, V] target, got {tuple(draft_tokens.shape)}")
        check_verify_inputs(name, flat_target, flat(draft_probs), flat(draft_tokens), num_slots.repeat_interleave(K),
                            flat(accept_uniforms), flat(sample_uniforms), rule, flat(allowed))
    if step_groups is not None and rule.exact and K > 1:
        return verify_joint(target_probs, draft_probs, draft_tokens, num_slots, accept_uniforms, sample_uniforms, residual_noise,
                            groups=step_groups, target_logits=target_logits, sampling=sampling, allowed=allowed,
                            coupling=coupling)
    return verify_reference(target_probs, draft_probs, draft_tokens, num_slots, accept_uniforms, sample_uniforms,
                            target_logits=target_logits, sampling=sampling, allowed=allowed, rule=rule, coupling=coupling)


verify.__doc__ = VERIFY_DOC


def verify_keyed(
    target_logits: torch.Tensor,  # [N, S, V] or [N, S, K, V] float32, CFG combined
    draft_tokens: torch.Tensor,  # [N, S] or [N, S, K] long, -1 = no draft
    num_slots: torch.Tensor,  # [N] long
    *,
    noise: Noise,
    rows: torch.Tensor,  # [N] long: each window's batch row
    positions: torch.Tensor,  # [N, S] long: the position each slot predicts
    sampling: SamplingConfig = SamplingConfig(),
    allowed: torch.Tensor | None = None,  # like the target, bool
    ranked: int = 0,
    check: bool = True,
    profile: DeviceProfile | None = None,  # the call's; None: the profile of the logits' device
) -> VerifyOutput:
    """Keyed verification (`mmspec.kernels.verify_keyed`): each slot's Gumbel winner under
    the row's keyed noise, the leading slots whose drafts equal their winners, and the
    winners as next drafts. A profile that verifies by Triton (CUDA) runs the Triton kernel,
    which makes the noise in the kernel from the keys (`ranked` > 0, for branches, runs the
    reference)."""
    if check:
        one = target_logits.dim() == 3
        _, flat = check_sampling_inputs(None, target_logits if one else target_logits.flatten(1, 2), sampling,
                                        None if allowed is None else (allowed if one else allowed.flatten(1, 2)))
        N, S = target_logits.shape[:2]
        if draft_tokens.shape != target_logits.shape[:-1] or draft_tokens.dtype != torch.long:
            raise ValueError(f"draft_tokens must be long {tuple(target_logits.shape[:-1])}, got {draft_tokens.dtype} {tuple(draft_tokens.shape)}")
        if num_slots.shape != (N,) or rows.shape != (N,) or positions.shape != (N, S):
            raise ValueError(f"num_slots and rows must be [{N}] and positions [{N}, {S}], got {tuple(num_slots.shape)}, "
                             f"{tuple(rows.shape)}, {tuple(positions.shape)}")
        if draft_tokens.numel() and int(draft_tokens.max()) >= target_logits.shape[-1]:
            raise ValueError(f"draft_tokens must be < V = {target_logits.shape[-1]}")
    if device_profile(target_logits.device if profile is None else profile).triton and not ranked:
        from mmspec.kernels.verify_keyed_triton import verify_keyed_triton  # imports Triton on the first call that runs it

        return verify_keyed_triton(target_logits.contiguous(), draft_tokens, num_slots, noise=noise, rows=rows,
                                   positions=positions, sampling=sampling, allowed=None if allowed is None else allowed.contiguous())
    return verify_keyed_reference(target_logits, draft_tokens, num_slots, noise=noise, rows=rows, positions=positions,
                                  sampling=sampling, allowed=allowed, ranked=ranked)
