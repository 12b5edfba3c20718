"""Jacobi decoding: SJD, MC-SJD and their relaxed and ZipAR variants in one loop.

The sequence is cut into segments decoded side by side: one segment in raster order, the
rows of the grid under ZipAR (row r opens once row r-1 has `zipar_window` tokens). Each
open segment keeps a window of L drafts after its first undecoded position n. One
forward serves every window of every sequence in the batch:

    inputs of a window = [token at n-1] + drafts at n .. n+L-1

(no draft on the segment's last position is fed: its output would predict outside the
segment). Input j predicts position n+j, so slot j of the window holds p for position
n+j and the draft there. Verification (`mmspec.kernels.verify`) commits the accepted
drafts and one drawn token per window; the window then slides by what it committed, and
its later slots carry their next drafts (q = their p) into the next iteration.

Cache rules: the token at n-1 and the accepted drafts were computed on committed context,
so their cache slots are committed; everything else is discarded by not committing it.
A segment whose predecessor is not decoded yet (a new ZipAR row) feeds a stand-in at
position n-1: the forced token there if the layout has one (an end-of-line token: exact
input, as ZipAR's Lumina port), else the previous row's latest token (ZipAR's LlamaGen
port); a stand-in is never committed. When a row finishes, its last token is fed once
more so that later rows can attend to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from mmspec.decoding.config import DecodingConfig
from mmspec.core.contracts import TokenLayout, TokenSession
from mmspec.decoding.drafts import first_drafts
from mmspec.core.sampling import SamplingConfig, guided_logits, sample, target_probs, uniforms
from mmspec.decoding.stats import DecodeStats
from mmspec.kernels.verify import verify


def segments(layout: TokenLayout, config: DecodingConfig) -> tuple[torch.Tensor, int]:
    """Start positions `[R]` of the segments and their length."""
    T = layout.length
    seg_len = layout.cols if config.zipar_window else T
    if config.zipar_window and (len(layout.grid) < 2 or layout.cols < 2):
        raise ValueError(f"ZipAR decodes rows side by side; layout grid {layout.grid} has no rows")
    return torch.arange(0, T, seg_len), seg_len


def extra_positions(layout: TokenLayout, config: DecodingConfig) -> int:
    """Scratch positions a batched forward may need past the end (padding inputs)."""
    starts, _ = segments(layout, config)
    return len(starts) * (config.draft_window + 1)


def decode_jacobi(
    session: TokenSession,
    layout: TokenLayout,
    sampling: SamplingConfig,
    config: DecodingConfig,
    generator: torch.Generator | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> tuple[torch.Tensor, DecodeStats]:
    """Decodes `layout.length` tokens per sequence with `config`; see the module docstring.

    The session must have been started with `extra_positions(layout, config)`.
    """
    start_time = time.perf_counter()
    B, T, V = session.batch_size, layout.length, layout.vocab_size
    L, S = config.draft_window, config.draft_window + 1
    rule = config.rule.bind(layout.token_embeddings, layout.allowed)
    device = session.prefill_logits().cond.device
    seg_start, seg_len = segments(layout, config)
    seg_start = seg_start.to(device)
    R = len(seg_start)
    seg_end = seg_start + seg_len
    lag = min(config.zipar_window or seg_len, seg_len)

    tokens = torch.full((B, T), -1, dtype=torch.long, device=device)
    committed = torch.zeros(B, T, dtype=torch.bool, device=device)
    kv_done = torch.zeros(B, T, dtype=torch.bool, device=device)
    commit_iteration = torch.zeros(B, T, dtype=torch.long, device=device)
    drafts = torch.full((B, R, L), -1, dtype=torch.long, device=device)
    draft_q = torch.zeros(B, R, L, V, device=device)
    n = seg_start.expand(B, R).clone()  # first undecoded position of each window
    opened = torch.zeros(B, R, dtype=torch.bool, device=device)
    opened[:, 0] = True
    rows = torch.arange(B, device=device)[:, None]
    slot = torch.arange(S, device=device)

    # 0. the prefill predicts position 0, drawn as AR does
    pos0 = torch.zeros(B, 1, dtype=torch.long, device=device)
    tokens[:, :1] = sample(target_probs(session.prefill_logits(), pos0, sampling, layout.allowed_at(pos0)), generator)
    committed[:, 0] = True
    n[:, 0] = 1
    forwards = 1
    if on_step:
        on_step(1, T)

    while not bool(committed.all()):
        # 1. open positions: ZipAR rows whose row above has `lag` tokens; first drafts
        if R > 1:
            opened[:, 1:] |= (n - seg_start)[:, :-1] >= lag
        live = opened & (n < seg_end)  # [B, R]
        slot_pos = n[..., None] + slot[:L]  # [B, R, L]
        in_seg = slot_pos < seg_end[None, :, None]
        need = live[..., None] & in_seg & (drafts < 0)
        if bool(need.any()):
            best = tokens.clone()
            placed = live[..., None] & in_seg & (drafts >= 0)
            best[rows[..., None].expand(B, R, L)[placed], slot_pos[placed]] = drafts[placed]
            new = first_drafts(best, torch.where(need, slot_pos, -1).view(B, R * L), layout, config.init, generator).view(B, R, L)
            drafts = torch.where(need, new, drafts)
            draft_q = torch.where(need[..., None], F.one_hot(new.clamp(min=0), V).float(), draft_q)

        # 2. inputs: per window its predecessor at n-1, then the drafts that predict inside
        fed = live[..., None] & (slot_pos < (seg_end - 1)[None, :, None])  # [B, R, L]
        pending = (n == seg_end) & (seg_end < T) & ~kv_done.gather(1, (seg_end - 1).expand(B, R))
        if R > 1:  # a new row whose predecessor is that last token feeds it itself
            pending[:, :-1] &= ~(live[:, 1:] & (n[:, 1:] == seg_start[1:]))
        has_pred = live | pending
        pred_pos = (n - 1).clamp(min=0)
        pred_known = committed.gather(1, pred_pos)
        stand_in = torch.zeros_like(n)
        stand_in[:, 1:] = tokens.gather(1, (n[:, :-1] - 1).clamp(min=0)).clamp(min=0)
        if layout.forced is not None:
            f = layout.forced.to(device)[pred_pos]
            stand_in = torch.where(f >= 0, f, stand_in)
        pred_tok = torch.where(pred_known, tokens.gather(1, pred_pos), stand_in)

        cand_valid = torch.cat([has_pred[..., None], fed], -1).view(B, -1)  # [B, R*S]
        cand_tok = torch.cat([pred_tok[..., None], drafts.clamp(min=0)], -1).view(B, -1)
        cand_pos = torch.cat([pred_pos[..., None], slot_pos], -1).view(B, -1)
        cand_seg = torch.arange(R, device=device)[:, None].expand(R, S).reshape(1, -1).expand(B, -1)
        cand_true = torch.cat([(has_pred & pred_known)[..., None], fed & (drafts >= 0)], -1).view(B, -1)
        order = torch.argsort((~cand_valid).int(), dim=1, stable=True)  # valid candidates first
        M = int(cand_valid.sum(1).max())
        take = order[:, :M]
        in_valid = cand_valid.gather(1, take)
        pad = torch.arange(M, device=device).expand(B, M)
        in_tok = torch.where(in_valid, cand_tok.gather(1, take), torch.zeros_like(take))
        in_pos = torch.where(in_valid, cand_pos.gather(1, take), T + pad)  # scratch positions
        in_segment = torch.where(in_valid, cand_seg.gather(1, take), R + pad)
        packed = torch.where(cand_valid, cand_valid.long().cumsum(1) - 1, 0)  # candidate -> input index

        # 3. forward; CFG at the predicted positions (the rest of the transform is fused into verify)
        logits = session.forward(in_tok, in_pos, in_segment)
        forwards += 1
        target = (in_pos + 1).clamp(max=T - 1)
        combined = guided_logits(logits, target, sampling)  # [B, M, V]
        allowed = layout.allowed_at(target)

        # 4. verify every window: slot j holds p for n+j (from candidate j) and the draft there
        num_slots = torch.where(live, 1 + fed.sum(-1), 0)  # [B, R]
        by_slot = packed.view(B, R * S)[..., None].expand(-1, -1, V)
        logits_win = combined.gather(1, by_slot).view(B, R, S, V)
        allowed_win = None if allowed is None else allowed.gather(1, by_slot).view(B, R, S, V)
        d_win = torch.cat([torch.where(in_seg, drafts, -1), drafts.new_full((B, R, 1), -1)], -1)
        q_win = torch.cat([draft_q, draft_q.new_zeros(B, R, 1, V)], 2)
        N = B * R
        out = verify(
            None, q_win.view(N, S, V), d_win.view(N, S), num_slots.view(N),
            uniforms((N, S), generator, device), uniforms((N, S), generator, device), rule, config.method == "mc-sjd",
            target_logits=logits_win.reshape(N, S, V), temperature=sampling.temperature, top_k=sampling.top_k,
            top_p=sampling.top_p, allowed=None if allowed_win is None else allowed_win.reshape(N, S, V),
        )
        p_win = out.target_probs.view(B, R, S, V) * (slot[None, None, :, None] < num_slots[..., None, None])

        # 5. commit; the session keeps the inputs computed on committed context; slide windows
        c = out.committed.view(B, R)
        acc = out.accepted.view(B, R)
        out_tok = out.tokens.view(B, R, S)
        new = slot < c[..., None]  # [B, R, S]
        at = (rows[..., None].expand(B, R, S)[new], (n[..., None] + slot)[new])
        tokens[at] = out_tok[new]
        committed[at] = True
        commit_iteration[at] = forwards - 1
        draft_ok = torch.cat([torch.ones_like(acc, dtype=torch.bool)[..., None], slot[:L] < acc[..., None]], -1).view(B, -1)
        keep = (cand_true & draft_ok).gather(1, take) & in_valid
        session.commit(in_pos, keep)
        kv_done[rows.expand(B, M)[keep], in_pos[keep]] = True
        n = n + c
        src = slot[:L] + c[..., None]  # new slot i takes old slot i + c
        carried = src < num_slots[..., None]
        drafts = torch.where(carried, out_tok.gather(2, src.clamp(max=S - 1)), -1)
        draft_q = p_win.gather(2, src.clamp(max=S - 1)[..., None].expand(-1, -1, -1, V)) * carried[..., None]
        if on_step:
            on_step(int(committed.sum()) // B, T)

    stats = DecodeStats(
        method=config.name,
        exact=config.exact,
        forward_passes=forwards,
        tokens_committed=B * T,
        wall_time_s=time.perf_counter() - start_time,
        commit_iteration=commit_iteration,
    )
    return tokens, stats
