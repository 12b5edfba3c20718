"""Joint verification of steps of K tokens: a step, or a group of its tokens, tested as
one token; exact.

Given the past, the K tokens of a step (the codebooks of an audio frame) are independent:
p(x) = prod_k p_k(x_k), and a draft step drawn token by token from its q_k has
q(x) = prod_k q_k(x_k). Speculative sampling over whole steps accepts the draft x when
u < min(1, p(x) / q(x)) and otherwise draws the step from norm((p - q)+) over all V^K
steps, so the committed step is distributed as p. Testing the K tokens one by one accepts
with prod_k min(1, p_k / q_k), never more (min(1, ab) >= min(1, a) min(1, b)) and less
whenever one codebook's ratio is above 1 while another's is below: the joint test lets
the one pay for the other. MC-SJD's next drafts are the maximal coupling of q and p over
whole steps the same way: keep x when u < min(1, p(x) / q(x)), else a residual draw.
The same holds for any partition of the K tokens into groups tested on their own (groups
of one are the token-wise test of `verify_reference`, which they reproduce bit for bit).

What the joint test costs: a rejected group is redrawn whole, where the token-wise test
keeps the tokens that passed, so the committed step and the next drafts move further from
what the later slots of the window were computed after. On the shipped speech model this
outweighs the longer accepted runs (docs/audio.md).

The residual has V^K entries (16.7M for 4 codebooks of 64), too many to write out, so it
is drawn by rejection from p: y ~ p, kept with probability 1 - min(1, q(y) / p(y)). A
trial is kept with probability TV(p, q), the same probability with which a slot needs a
residual draw, so a slot costs one trial in expectation however close p and q are. Trials
come in rounds (`TRIALS` per slot, four times more each round) until every slot has its
step; trial j of a slot uses that slot's keyed uniforms number j (`SlotNoise.trials`), so a
slot's draw does not depend on how many trials the other slots needed.
"""

from __future__ import annotations

import torch

from collections.abc import Callable

from mmspec.core.noise import SlotNoise
from mmspec.core.sampling import SamplingConfig, categorical, transform
from mmspec.kernels.verify_types import VerifyOutput

TRIALS = 16
MAX_TRIALS = 4096
# below this bound on TV(p, q) the two differ by float rounding only; the step is drawn
# from p, as the token-wise reference does for a residual of no mass
ROUNDING_TV = 1e-6


def step_prob(probs: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """prod_k probs[..., k, steps_k] in float64: probs `[..., K, V]`, steps `[..., K]`."""
    return probs.double().gather(-1, steps[..., None])[..., 0].prod(-1)


def draw_residual(p: torch.Tensor, q: torch.Tensor, trials: Callable[[int, int], torch.Tensor]) -> torch.Tensor:
    """One step per row, long `[M, K]`, from norm((p - q)+) over whole steps, where the rows
    `[M, K, V]` of p and q are the factors of their step distributions. `trials(count, first)`
    gives float64 `[M, K + 1, count]`: per row, the uniforms of trials `first ..` (K to draw
    the step from p, one to keep it)."""
    M, K, V = p.shape
    out = torch.full((M, K), -1, dtype=torch.long, device=p.device)
    close = (p - q).clamp(min=0).sum(-1).sum(-1) < ROUNDING_TV  # an upper bound on TV(p, q)
    if bool(close.any()):
        out[close] = categorical(p[close], trials(1, 0)[close][:, :K, 0])
    todo = (~close).nonzero()[:, 0]
    n, first = TRIALS, 0
    while len(todo):
        u = trials(n, first)[todo]  # [m, K + 1, n]
        pt, qt = p[todo, None].expand(-1, n, -1, -1), q[todo, None].expand(-1, n, -1, -1)
        y = categorical(pt, u[:, :K].transpose(1, 2).contiguous())  # [m, n, K], p(y) > 0
        keep = u[:, K] < 1 - (step_prob(qt, y) / step_prob(pt, y)).clamp(max=1)
        found = keep.any(1)
        first_kept = keep.int().argmax(1)
        out[todo[found]] = y[found, first_kept[found]]
        todo = todo[~found]
        first += n
        n = min(4 * n, MAX_TRIALS)
    return out


def verify_joint(
    target_probs: torch.Tensor | None,  # [N, S, K, V]
    draft_probs: torch.Tensor | None,  # like the target; None = one-hot on the drafts
    draft_tokens: torch.Tensor,  # [N, S, K] long, a step without a draft is all -1
    num_slots: torch.Tensor,  # [N]
    accept_uniforms: torch.Tensor,  # [N, S, K] float64; a group's first token's uniform tests it
    sample_uniforms: torch.Tensor,  # [N, S, K] float64; draws from p and one-token residuals
    residual_noise: SlotNoise | None,  # the trials of residuals of several tokens
    *,
    groups: tuple[tuple[int, ...], ...] | None = None,  # codebooks tested together; None: all K
    target_logits: torch.Tensor | None = None,
    sampling: SamplingConfig = SamplingConfig(),
    allowed: torch.Tensor | None = None,
    coupling: bool = True,
) -> VerifyOutput:
    """`verify` with each group of a step's tokens accepted or rejected as a whole (module
    doc); a step is accepted when all its groups are. Groups of one token are
    `verify_reference`'s token-wise test. The same arguments and result as
    `verify_reference`, and the keyed noise of the slots the residuals are drawn with."""
    if target_logits is not None:
        target_probs = transform(target_logits, sampling, allowed)
    p = target_probs.float()
    N, S, K, V = p.shape
    groups = [list(g) for g in groups or (range(K),)]
    slot = torch.arange(S, device=p.device)
    has_p = slot[None, :] < num_slots[:, None]  # [N, S]
    has_draft = has_p & (draft_tokens >= 0).all(-1)
    d = draft_tokens.clamp(min=0)
    q = torch.nn.functional.one_hot(d, V).float() if draft_probs is None else draft_probs.float()
    q = q * has_draft[..., None, None]
    passed = []  # [N, S] per group
    for g in groups:
        q_d = step_prob(q[:, :, g], d[:, :, g])
        ratio = torch.where(q_d > 0, step_prob(p[:, :, g], d[:, :, g]) / q_d.clamp(min=1e-300), 0.0)
        passed.append(has_draft & (accept_uniforms[:, :, g[0]] < ratio.clamp(max=1.0)))
    accepted = torch.stack(passed, -1).all(-1).long().cumprod(-1).sum(-1)
    run_length = accepted + (accepted < num_slots).long()

    # from slot `accepted` on, every group of a slot with a p gets tokens: in the rejected
    # slot, the groups that passed keep their drafts and the others are drawn from their
    # residual; later slots keep or redraw each group the same way (MC-SJD) or are drawn
    # afresh from p (SJD); slots without a draft are drawn from p
    at = slot[None, :] == accepted[:, None]
    after = slot[None, :] >= accepted[:, None]
    fresh = categorical(p, sample_uniforms)  # [N, S, K]
    steps = fresh.clone()
    for gi, (g, ok) in enumerate(zip(groups, passed)):
        steps[:, :, g] = torch.where(ok[..., None] & (at | coupling)[..., None], d[:, :, g], fresh[:, :, g])
        redraw = has_draft & after & ~ok & (at | coupling)
        if len(g) == 1:
            residual = (p[:, :, g] - q[:, :, g]).clamp(min=0)
            residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p[:, :, g])
            steps[:, :, g] = torch.where(redraw[..., None], categorical(residual, sample_uniforms[:, :, g]), steps[:, :, g])
        elif bool(redraw.any()):
            part = steps[:, :, g]
            if residual_noise is None:
                raise ValueError("a joint test draws the residuals of several tokens from keyed noise: pass residual_noise")
            trials = lambda count, first, where=redraw, g=g, gi=gi: residual_noise.trials(where, K + len(groups), count, first)[
                :, g + [K + gi]]
            part[redraw] = draw_residual(p[:, :, g][redraw], q[:, :, g][redraw], trials)
            steps[:, :, g] = part
    before = (slot[None, :] < accepted[:, None])[..., None]
    tokens = torch.where(before, d, steps)
    tokens = torch.where(has_p[..., None], tokens, draft_tokens)
    return VerifyOutput(accepted=accepted, run_length=run_length, tokens=tokens, target_probs=p)
