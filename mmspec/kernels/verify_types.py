"""The contract shared by every implementation of `verify`: its result type, its docstring
and the check that a rule is bound to the vocabulary."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mmspec.core.rules import GSDRule, LanternRule, PCGRule


@dataclass
class VerifyOutput:
    """Attributes:
    accepted (`torch.Tensor`): long `[N]`, leading drafts accepted.
    run_length (`torch.Tensor`): long `[N]`, slots committed (the window's run): the
        accepted drafts plus the drawn token after them when that slot has a p. Also
        readable as `committed`, its earlier name.
    tokens (`torch.Tensor`): long `[N, S]`: accepted drafts, the drawn token at slot
        `accepted`, the next drafts after it (their q is the slot's p); past `num_slots`
        the input drafts are passed through.
    target_probs (`torch.Tensor`): float32 `[N, S, V]`, the p every slot was verified
        against: the input `target_probs`, or the sampling transform of `target_logits`
        (computed for every slot, also past `num_slots`). It is the q of the next drafts.
        None from keyed verification, whose drafts are point masses
        (`mmspec.kernels.verify_keyed`) unless `ranked` asked for its stand-in.
    ranked (`torch.Tensor`, *optional*): keyed verification only: long `[N, S, m]` (`[N, S,
        K, m]`), each slot's best tokens by perturbed score, the winner first.
    """

    accepted: torch.Tensor
    run_length: torch.Tensor
    tokens: torch.Tensor
    target_probs: torch.Tensor | None
    ranked: torch.Tensor | None = None

    @property
    def committed(self) -> torch.Tensor:
        """`run_length` under its earlier name."""
        return self.run_length


VERIFY_DOC = """Verifies N windows of drafts against their target distributions.

    Slots of K tokens (`[N, S, K, V]` targets, `[N, S, K]` drafts and uniforms) run on
    the PyTorch path: a slot is accepted when all its K drafts are, or with `step_groups`
    (exact rule only) when each group of its drafts passes one test as a whole, a group's
    residual then drawn from `residual_noise` (`mmspec.kernels.verify_joint`).

    Slot i of a window holds the target p_i of its position and optionally a draft d_i drawn
    from q_i. Slots are accepted left to right while `accept_uniforms[i] < rule.accept_prob`;
    the first rejected slot, or the first with a p but no draft, is drawn from
    norm((p_i - q_i)+) (from p_i without a draft) and ends the committed run. Every later
    slot with a p gets its next draft: the maximal coupling of q_i and p_i (`coupling=True`,
    MC-SJD) or a fresh sample from p_i (SJD). Draws invert the float64 CDF at
    `sample_uniforms`, as `mmspec.core.sampling.categorical`, so every implementation
    fed the same uniforms makes the same decisions.

    The target comes as probabilities, or as logits with the sampling transform fused in,
    in the order of `mmspec.core.sampling`: allowed mask, temperature, top-k (ties at
    the k-th kept), top-p (LlamaGen's shift by one), softmax; temperature 0 is one-hot on
    the arg-max. Classifier-free guidance is the caller's: pass the combined logits
    `uncond + s * (cond - uncond)`.

    Args:
        target_probs (`torch.Tensor` or `None`): float32 `[N, S, V]`, p of every slot after
            the sampling transform; None when `target_logits` is given.
        draft_probs (`torch.Tensor` or `None`): float32 `[N, S, V]`, q every draft was drawn
            from; None means one-hot on the draft (random or copied drafts).
        draft_tokens (`torch.Tensor`): long `[N, S]`, the drafts; -1 where a slot has none.
        num_slots (`torch.Tensor`): long `[N]`, how many leading slots have a p.
        accept_uniforms (`torch.Tensor`): float64 `[N, S]` in [0, 1), one acceptance test per slot.
        sample_uniforms (`torch.Tensor`): float64 `[N, S]` in [0, 1), one draw per slot.
        target_logits (`torch.Tensor`, *optional*): float32 `[N, S, V]`, CFG already
            combined; give exactly one of `target_probs` and `target_logits`.
        sampling (`SamplingConfig`, *optional*): the transform of `target_logits`: its
            temperature (0 is greedy), top-k and top-p; its guidance is the caller's.
        allowed (`torch.Tensor`, *optional*): bool `[N, S, V]`, tokens that may be drawn;
            every row must allow one.
        rule (*optional*, defaults to `ExactRule()`): `ExactRule()`, or `LanternRule(...)` /
            `GSDRule(...)` bound to the token embeddings (`rule.bind(embeddings)`).
        coupling (`bool`, *optional*, defaults to `True`): MC-SJD's maximal coupling for the
            next drafts (else fresh samples from p).
        step_groups (`tuple[tuple[int, ...], ...]`, *optional*): for slots of K tokens, the
            groups of token indices tested together, e.g. `((0, 1, 2, 3),)` for a whole step
            as one token of V^K (exact rule; relaxed rules test token by token). None: each
            token on its own.
        residual_noise (`SlotNoise`, *optional*): the slots' keyed noise, for the residuals of groups.
        profile (`DeviceProfile`, *optional*): the call's device profile (`mmspec.core.device`),
            which chooses the Triton kernel or the PyTorch reference; defaults to the profile
            of the tensors' device.

    Returns:
        `VerifyOutput`: accepted and run-length counts `[N]`, the tokens `[N, S]` and the p used.

    Example:
        >>> import torch
        >>> from mmspec.core.sampling import SamplingConfig
        >>> from mmspec.kernels.verify import verify
        >>> p = torch.tensor([[[0.5, 0.5], [0.9, 0.1]]])
        >>> u = torch.zeros(1, 2, dtype=torch.float64)
        >>> out = verify(p, p.clone(), torch.tensor([[1, -1]]), torch.tensor([2]), u, u)
        >>> out.accepted.tolist(), out.run_length.tolist(), out.tokens.tolist()
        ([1], [2], [[1, 0]])
        >>> logits = torch.tensor([[[2.0, 1.0, 0.0]]])
        >>> verify(None, None, torch.tensor([[2]]), torch.tensor([1]), u[:, :1], u[:, :1],
        ...        target_logits=logits, sampling=SamplingConfig(temperature=0.0)).tokens.tolist()
        [[0]]
    """


def check_rule(rule, V: int) -> None:
    if isinstance(rule, LanternRule):
        if rule.neighbours is None:
            raise ValueError("bind(embeddings) the LANTERN rule before use")
        if rule.neighbours.dim() != 2 or rule.neighbours.shape[0] != V:
            raise ValueError(f"LANTERN neighbour table {tuple(rule.neighbours.shape)} must be [V = {V}, k]; bind the layout's embeddings")
    if isinstance(rule, PCGRule) and rule.group_of is None:
        raise ValueError("bind(embeddings) the PCG rule before use")
    if isinstance(rule, GSDRule):
        if rule.embeddings is None:
            raise ValueError("bind(embeddings) the GSD rule before use")
        if rule.embeddings.dim() != 2 or rule.embeddings.shape[0] != V:
            raise ValueError(f"GSD embedding table {tuple(rule.embeddings.shape)} must be [V = {V}, E]; bind the layout's embeddings")
