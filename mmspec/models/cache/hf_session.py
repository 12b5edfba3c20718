"""A transformers Llama-style decoder driven as a `TokenSession` over `StaticKVCache`.

Emu3's `text_model` and Janus' `language_model` are stacks of Llama-like decoder layers
(`layers`, `rotary_emb`, `norm`) whose attention calls `cache.update(k, v, layer_idx)` and
adds the 4-D mask it is given. We run those layers ourselves, so that every query gets its
own position id and its own visible slots:

* `SlotCache` is the one method of transformers' `Cache` those layers call: it writes the
  keys and values at this forward's slots of a `StaticKVCache` and returns the whole buffer;
* the mask is `StaticKVCache.attention_mask` (committed slots before the query, same-call
  inputs of its segment not after it), made additive for the eager and SDPA kernels.

Tree attention (`CallTree`, for exact branches) is the same two levers: an input standing
for position t gets the position id of t and sees the committed slots before t and the
inputs of the call its `visible` row names, wherever its keys are written.

The cache holds, per row, the left-padded prompt in slots `[0, P)` and generated position
t in slot `P + t`. Padded prompt slots are never committed. Position ids follow
transformers' `cumsum(attention_mask) - 1`, so generated position t of a row with `m`
valid prompt tokens has position id `m + t`, whatever the padding.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import torch
from torch import nn

from mmspec.core.contracts import CallTree, GuidedLogits
from mmspec.models.cache.attention import invariant_attention
from mmspec.models.cache.kv_cache import CachedSession, StaticKVCache

ATTENTION_KERNELS = ("eager", "sdpa")  # the kernels that take an arbitrary additive mask


class SlotCache:
    """Writes each layer's keys and values at `slots [R, n]` of `cache`; the part of
    transformers' `Cache` API that attention layers and model forwards call."""

    is_compileable = False

    def __init__(self, cache: StaticKVCache, slots: torch.Tensor):
        self.cache, self.slots = cache, slots

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """What models read to offset default position ids; mmspec always passes its own."""
        return int(self.slots.min())

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        # key_states: [R, H_kv, n, D] -> the layer's whole [R, H_kv, S, D]
        return self.cache.update(layer_idx, self.slots, key_states, value_states)


@functools.cache
def cache_kwarg(layer_type: type) -> str:
    """transformers 5.x renamed the layers' `past_key_values` to `cache`; the one it takes."""
    return "cache" if "cache" in inspect.signature(layer_type.forward).parameters else "past_key_values"


def check_attention_kernel(config) -> None:
    """Raises a ValueError when a model configured by `config` is not run with a kernel
    that takes our mask."""
    kernel = config._attn_implementation
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(
            f"attention implementation {kernel!r} cannot take mmspec's per-slot mask; load the model with "
            f"attn_implementation='sdpa' or 'eager'"
        )


def allocate_cache(config, rows: int, slots: int, dtype: torch.dtype, device) -> StaticKVCache:
    """An empty cache for `rows` sequences of `slots` positions of a text config's layers."""
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return StaticKVCache(config.num_hidden_layers, rows, kv_heads, slots, head_dim, dtype=dtype, device=device)


def additive_mask(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool "may attend" mask as the additive float mask the eager and SDPA kernels take."""
    mask = torch.zeros(visible.shape, dtype=dtype, device=visible.device)
    return mask.masked_fill_(~visible, torch.finfo(dtype).min)


def decoder_forward(
    decoder: nn.Module,
    embeds: torch.Tensor,  # [R, n, hidden]
    position_ids: torch.Tensor,  # [R, n] long
    cache: StaticKVCache,
    slots: torch.Tensor,  # [R, n] long
    segments: torch.Tensor | None = None,  # [R, n] long
    key_valid: torch.Tensor | None = None,  # [R, n] bool
    acts_as: torch.Tensor | None = None,  # [R, n] long: tree attention, the slot each input stands for
    visible: torch.Tensor | None = None,  # [R, n, n] bool: tree attention, what it sees of the call
) -> torch.Tensor:
    """Final-norm hidden states `[R, n, hidden]` of `embeds` run at `slots` of `cache`."""
    mask = additive_mask(cache.attention_mask(slots, segments, key_valid, acts_as, visible), embeds.dtype)  # [R, 1, n, S]
    rope = decoder.rotary_emb(embeds, position_ids)
    layers = decoder.layers[: decoder.config.num_hidden_layers]
    kv = {cache_kwarg(type(layers[0])): SlotCache(cache, slots)}
    h = embeds
    with invariant_attention(h.dtype, h.device):  # in half precision on a CPU: the same per query whatever the window
        for layer in layers:
            h = layer(h, attention_mask=mask, position_ids=position_ids, position_embeddings=rope, **kv)
            h = h[0] if isinstance(h, tuple) else h  # Chameleon's layers return (hidden_states,)
    return decoder.norm(h)


class DecoderSession(CachedSession):
    """One decoding call of a transformers decoder: the rows `[cond; uncond]` of
    `batch_size` prompts, each prefilled, then generated tokens in slots after the prompt.

    Args:
        decoder (`nn.Module`): the Llama-style stack (`layers`, `rotary_emb`, `norm`).
        embed (`Callable`): generated token ids `[R, n]` -> input embeddings `[R, n, hidden]`.
        head (`Callable`): hidden states `[R, n, hidden]` -> logits `[R, n, V]`.
        prompt_embeds (`torch.Tensor`): `[R, P, hidden]`, the left-padded prompts of all rows.
        prompt_mask (`torch.Tensor`): bool `[R, P]`, True at real prompt tokens.
        batch_size (`int`): conditions B; `R` is `2B` when `guided`, else B.
        guided (`bool`): whether rows B.. hold the unconditional prompts.
        steps (`int`): generated positions (the layout's length).
        extra_positions (`int`): the engine's scratch positions past them.
    """

    supports_tree = True
    row_state = ("first_position",)

    def __init__(self, decoder: nn.Module, embed: Callable, head: Callable, prompt_embeds: torch.Tensor,
                 prompt_mask: torch.Tensor, *, batch_size: int, guided: bool, steps: int, extra_positions: int = 0):
        check_attention_kernel(decoder.config)
        R, P = prompt_mask.shape
        if not bool(prompt_mask[:, -1].all()):
            raise ValueError("every prompt must end in its last column: pad prompts on the left (padding_side='left')")
        w = decoder.embed_tokens.weight
        cache = allocate_cache(decoder.config, R, P + steps + extra_positions, w.dtype, w.device)
        super().__init__(cache, P, batch_size=batch_size, guided=guided, steps=steps)
        self.decoder, self.embed, self.head = decoder, embed, head
        self.first_position = prompt_mask.long().sum(1)  # [R]: position id of generated position 0
        positions = (prompt_mask.long().cumsum(1) - 1).clamp(min=0)  # padding's position ids are never seen
        prompt_slots = torch.arange(P, device=prompt_mask.device).expand(R, P)
        hidden = decoder_forward(decoder, prompt_embeds, positions, self.cache, prompt_slots, key_valid=prompt_mask)
        self.cache.commit(prompt_slots, prompt_mask)
        self._prefill = self.split(head(hidden[:, -1:]).float())

    @classmethod
    def from_token_ids(cls, decoder: nn.Module, head: Callable, ids: torch.Tensor, mask: torch.Tensor, **kwargs) -> "DecoderSession":
        """A session over prompts given as token ids `[R, P]` (and their mask), embedded by the
        decoder's own table on its device; `kwargs` as for the constructor."""
        device = decoder.embed_tokens.weight.device
        ids, mask = ids.to(device), mask.to(device)
        return cls(decoder, decoder.embed_tokens, head, decoder.embed_tokens(ids), mask, **kwargs)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, segments: torch.Tensor | None = None,
                tree: CallTree | None = None) -> GuidedLogits:
        self.check_inputs(tokens, positions)
        slots = self.slots(positions)
        segs, acts_as, visible = self.call_views(segments, tree)
        stands_for = positions if tree is None else tree.acts_as  # a candidate at a scratch slot runs as its position
        position_ids = self.first_position[:, None] + self.rows(stands_for)
        hidden = decoder_forward(self.decoder, self.embed(self.rows(tokens)), position_ids, self.cache, slots, segs,
                                 acts_as=acts_as, visible=visible)
        return self.split(self.head(hidden).float())
