"""Prompt-lookup decoding on mmspec's session contract: exact, batched, for text.

Each forward feeds every sequence's last committed token and up to `num_drafts` drafts
copied from its prompt or its text so far (`PhraseLookup`: the tokens that followed the
first earlier occurrence of the last n tokens, longest n first; failing that, of the n
tokens before the last one, skipping the word that differed),
verifies the drafts left to right with the exact rule, and commits the accepted drafts
plus one token drawn from the target. A draft is a point mass, so the exact rule accepts
d with probability p(d), and after a rejection the next token is drawn from p with d
removed (`norm(max(0, p - q))`): every committed token is distributed as the model's.

Why beside the engine: the engine's Jacobi windows carry, after a rejection, the last
forward's predictions for the later slots (made after the rejected draft), and its
drafter only fills slots that enter the window. Here every forward drafts again from the
committed text, which is what lets a caption that repeats an example's wording commit
several words per forward.

Example:
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> lm = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
    ...                                   num_hidden_layers=1, num_attention_heads=2)).eval()
    >>> ids, stats = prompt_lookup_text(lm, torch.tensor([[1, 2, 3, 1, 2]]), max_new_tokens=8)
    >>> ids.shape, stats.method
    (torch.Size([1, 13]), 'prompt-lookup')
"""

from __future__ import annotations

import time

import torch

from mmspec.core.sampling import SamplingConfig, categorical, target_probs, uniforms
from dataclasses import dataclass

from mmspec.decoding.drafts import DraftContext, first_drafts
from mmspec.decoding.stats import DecodeStats
from mmspec.decoding.steps import prompt_steps
from mmspec.models.transformers_lm import VISION_INPUTS, TransformersLM
from mmspec.text import SETTINGS, StreamFeed, processors_of, resolve_settings, sampling_of, stop_ids

NUM_DRAFTS = 10  # transformers' prompt_lookup_num_tokens default


def follower(hay: torch.Tensor, end: torch.Tensor, n: int, skip: int) -> torch.Tensor:
    """Per row of `hay [B, H, K]` (-1 = unknown), the token `skip + 1` places after the first
    occurrence of the n tokens ending just before index `end [B]`, among occurrences
    other than that n-gram itself; `[B, K]`, -1 where there is none."""
    B, H, K = hay.shape
    none = torch.full((B, K), -1, dtype=torch.long, device=hay.device)
    span = H - n - skip  # occurrences that have a follower inside hay
    if span <= 0:
        return none
    idx = ((end - n)[:, None] + torch.arange(n, device=hay.device)).clamp(min=0)
    gram = hay.gather(1, idx[..., None].expand(B, n, K))  # [B, n, K]
    known = (end - n >= 0) & (gram >= 0).all(-1).all(-1)
    windows = hay.unfold(1, n, 1).transpose(-1, -2)[:, :span]  # [B, span, n, K]
    follow = hay[:, n + skip : n + skip + span]  # [B, span, K]
    j = torch.arange(span, device=hay.device)
    match = (windows == gram[:, None]).all(-1).all(-1) & (follow >= 0).all(-1) & (j[None] + n < end[:, None])
    first = torch.where(match, j, span).amin(1)
    found = known & (first < span)
    return torch.where(found[:, None], follow[torch.arange(B, device=hay.device), first.clamp(max=span - 1)], none)


@dataclass(frozen=True)
class PhraseLookup:
    """A lookup drafter for text that repeats a phrasing with some words changed (a caption
    in an example's words): the token after the first earlier occurrence of the last n
    tokens (n = `max_ngram` .. 1); when none occurs, the token two after the first
    occurrence of the n tokens before the last one, as if the last word were a
    substitution ("on a black" -> "on a blue background" -> "background")."""

    max_ngram: int = 3
    name = "lookup"  # a lookup drafter: mmspec.text takes it by this name

    def propose(self, ctx: DraftContext, pos: torch.Tensor, u: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
        hay = ctx.history if ctx.prompt is None else torch.cat([ctx.prompt.to(ctx.history), ctx.history], 1)  # [B, H, K]
        here = pos + (hay.shape[1] - ctx.history.shape[1])  # index of the position in `hay`
        out = torch.full((hay.shape[0], hay.shape[2]), -1, dtype=torch.long, device=hay.device)
        for skip in (0, 1):
            for n in range(self.max_ngram, 0, -1):
                found = follower(hay, here - skip, n, skip)
                out = torch.where((out < 0) & (found >= 0), found, out)
                if bool((out >= 0).all()):  # every row has its draft: shorter n-grams cannot win
                    return out
        return out


@torch.no_grad()
def lookup_decode(
    token_model: TransformersLM,
    condition: dict,
    sampling: SamplingConfig,
    generator: torch.Generator | None = None,
    *,
    stop_tokens: list[int] = (),
    pad_token_id: int = 0,
    num_drafts: int = NUM_DRAFTS,
    lookup: PhraseLookup = PhraseLookup(),
    on_commit=None,
) -> tuple[torch.Tensor, DecodeStats]:
    """Decodes up to `token_model.layout().length` tokens per sequence of `condition`.

    Returns tokens long `[B, T]` (`pad_token_id` after each sequence's stop token) and the
    call's `DecodeStats` (method "prompt-lookup", forwards with the prefill).
    """
    if isinstance(num_drafts, bool) or not isinstance(num_drafts, int) or num_drafts < 1:
        raise ValueError(f"num_drafts must be a whole number >= 1, got {num_drafts!r}")
    began = time.perf_counter()
    layout = token_model.layout()
    T, D = layout.length, num_drafts
    session = token_model.start(condition, guided=False, extra_positions=D + 1)
    B = session.batch_size
    device = session.prompt_tokens.device
    prompt = prompt_steps(session, 1)
    rows, slots = torch.arange(B, device=device), torch.arange(D + 1, device=device)
    stops = torch.tensor(list(stop_tokens), dtype=torch.long, device=device)
    tokens = torch.full((B, T + D + 1), -1, dtype=torch.long, device=device)  # committed, -1 beyond
    iteration = torch.zeros((B, T), dtype=torch.long, device=device)

    # the prefill predicts position 0
    p0 = target_probs(session.prefill_logits(), torch.zeros((B, 1), dtype=torch.long, device=device), sampling)[:, 0]
    tokens[:, 0] = categorical(p0, uniforms((B,), generator, device))
    n = torch.ones(B, dtype=torch.long, device=device)  # committed tokens per sequence
    done = torch.isin(tokens[:, 0], stops) | (n >= T)
    forwards = 1
    if on_commit:
        on_commit(tokens[:, :T])
    while not bool(done.all()):
        # 1. drafts: lookup in the prompt and the committed text, left to right
        where = n[:, None] + slots[:D]  # [B, D]
        where = torch.where(~done[:, None] & (where < T), where, -1)
        drafts = first_drafts(lookup, tokens[..., None].clone(), where, layout, prompt, generator)[..., 0]  # [B, D]
        k = (drafts >= 0).long().cumprod(1).sum(1)  # leading drafts per sequence
        # 2. forward: the last committed token, then the drafts (finished rows ride along in scratch slots)
        last = tokens[rows, n - 1]
        inputs = torch.cat([last[:, None], drafts.clamp(min=0)], 1)  # [B, D + 1]
        positions = torch.where(done[:, None], T + slots, (n - 1)[:, None] + slots)
        p = target_probs(session.forward(inputs, positions), positions + 1, sampling)  # [B, D + 1, V]
        forwards += 1
        # 3. verify: accept draft j with probability p_j(d_j), while all before it were accepted
        u = uniforms((B, D + 1), generator, device)
        p_draft = p[:, :D].gather(-1, drafts.clamp(min=0)[..., None])[..., 0]
        accepted = ((u[:, :D] < p_draft) & (slots[:D] < k[:, None])).long().cumprod(1).sum(1)  # [B]
        # 4. one token from the target after the accepted drafts; a rejected draft's mass removed
        p_next = p[rows, accepted]  # [B, V]
        rejected = drafts[rows, accepted.clamp(max=D - 1)]
        p_next = torch.where((accepted < k)[:, None], p_next.scatter(-1, rejected.clamp(min=0)[:, None], 0.0), p_next)
        new = torch.cat([drafts.clamp(min=0), torch.zeros_like(last)[:, None]], 1)
        new[rows, accepted] = categorical(p_next, u[:, D])
        # 5. commit up to the first stop token and the length limit; keep the cache of the
        #    inputs computed on committed context (the last token and the accepted drafts)
        count = accepted + 1
        stop_at = torch.isin(new, stops) & (slots < count[:, None])
        count = torch.where(stop_at.any(1), stop_at.int().argmax(1) + 1, count)
        count = torch.where(done, 0, torch.minimum(count, T - n))
        session.commit(positions, ~done[:, None] & (slots <= accepted[:, None]) & (positions < T))
        write = slots < count[:, None]
        at = (rows[:, None].expand_as(write)[write], (n[:, None] + slots).expand_as(write)[write])
        tokens[at] = new[write]
        iteration[at] = forwards - 1
        n = n + count
        done = done | stop_at.any(1) | (n >= T)
        if on_commit:
            on_commit(tokens[:, :T])
    out = tokens[:, :T].masked_fill(tokens[:, :T] < 0, pad_token_id)
    stats = DecodeStats(method="prompt-lookup", exact=True, forward_passes=forwards, tokens_committed=int(n.sum()),
                        wall_time_s=time.perf_counter() - began, commit_iteration=iteration, lengths=n.clone())
    return out, stats


@torch.no_grad()
def prompt_lookup_text(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    num_drafts: int = NUM_DRAFTS,
    generation_config=None,
    generator: torch.Generator | None = None,
    streamer=None,
    **kwargs,
) -> tuple[torch.Tensor, DecodeStats]:
    """`mmspec.text.generate_text`'s call with prompt-lookup decoding: the same settings
    (`max_new_tokens`, `do_sample`, `temperature`, `top_k`, `top_p`, `eos_token_id`,
    `pad_token_id`, a VLM's `pixel_values`), the same output `(ids [B, P + N], stats)`.
    History-dependent processors (`repetition_penalty`, `no_repeat_ngram_size`,
    `min_new_tokens`) are refused: use `generate_text` for them."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise ValueError("input_ids must be a non-empty [batch, prompt length] tensor of token ids")
    vision = {k: kwargs.pop(k) for k in VISION_INPUTS if k in kwargs}
    unknown = set(kwargs) - set(SETTINGS)
    if unknown:
        raise ValueError(f"prompt_lookup_text does not take {', '.join(sorted(unknown))}")
    settings = resolve_settings(model, generation_config, kwargs)
    eos = stop_ids(settings)
    if processors_of(settings, eos):
        raise ValueError("prompt-lookup decoding does not apply repetition_penalty, no_repeat_ngram_size or min_new_tokens; "
                         "use generate_text for them")
    max_new = settings["max_new_tokens"]
    if max_new is None:
        max_new = settings["max_length"] - input_ids.shape[1]
    if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1:
        raise ValueError(f"max_new_tokens must be a whole number >= 1, got {max_new!r}")
    if streamer is not None and input_ids.shape[0] != 1:
        raise ValueError(f"a streamer shows one sequence; got a batch of {input_ids.shape[0]}")
    pad = settings["pad_token_id"]
    pad = (eos[0] if eos else 0) if pad is None else int(pad)
    feed = None if streamer is None else StreamFeed(streamer, input_ids)
    tokens, stats = lookup_decode(TransformersLM(model, max_new), dict(input_ids=input_ids, attention_mask=attention_mask, **vision),
                                  sampling_of(settings), generator, stop_tokens=eos, pad_token_id=pad, num_drafts=num_drafts,
                                  on_commit=feed)
    if streamer is not None:
        streamer.end()
    return torch.cat([input_ids, tokens[:, : int(stats.lengths.max())]], 1), stats
