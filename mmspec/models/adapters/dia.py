"""transformers' Dia (`DiaForConditionalGeneration`), unmodified, as a `TokenModel` of C = 9
DAC codebooks ("channels") per step.

Dia's encoder reads the text's UTF-8 bytes once; its decoder writes a step of C channels
per forward under the delay pattern of `config.delay_pattern` (`[0, 8, 9, ..., 15]`): channel
c runs d_c steps behind channel 0 (`mmspec.models.adapters.delay`, shared with MusicGen).
Decoder position 0 holds the BOS step; generated step t (the engine's position t) sits at
decoder position t + 1. We run the decoder's layers ourselves, as the MusicGen adapter does:
summed channel embeddings, the rotary position of each input's own step, our committed-slot
mask over `SlotCache` for self-attention (tree attention included), the text's keys and
values cached by the first forward for cross-attention, then `logits_dense`.

transformers' Dia `generate` (`models/dia/generation_dia.py` and the three Dia processors of
`generation/logits_process.py`) applies these rules; each is expressed here as follows:

1. Guidance (`DiaClassifierFreeGuidanceLogitsProcessor`): unconditional rows read an all-zero
   text under the same mask; the guided logits are `c + s * (c - u)`, and with a guidance
   top-k (transformers passes the sampling `top_k`) the result is the *conditional* logits
   kept on the top-k of the guided ones. mmspec's `u + s * (c - u)` cannot say the second
   form, so the session combines the rows itself and returns them as `cond` (`uncond`
   None): `DiaLM(guidance_scale=, guidance_top_k=)`, and the engine samples with
   `guidance_scale=1`.
2. The EOS channel filter (`DiaEOSChannelFilterLogitsProcessor`): channels 1.. may not hold
   EOS or any id above it, channel 0 no id above EOS; channel 0 holds EOS exactly when EOS
   is its arg-max. A function of a step's logits alone: applied in the session's logits.
3. The delayed tail (`DiaEOSDelayPatternLogitsProcessor` and the pad that `generate` writes
   into a finished channel): once channel 0 holds EOS at decoder position s, channel c holds
   EOS at s + d_c and the pad id after it; at position `max_new_tokens - D` (D the largest
   delay) channel 0 is forced to EOS if it has not ended. This depends on the history: the
   session keeps the channel-0 token each cache slot was fed, and forces the logits of an
   input from the tokens that input attends to (committed slots before it and the inputs of
   its call it sees). That is the context the network itself conditions on, so a draft's
   logits equal AR's whenever the drafts before it are accepted: every exact method stays
   exact.
4. BOS before each channel's first frame (the processor's delayed decoder input that
   `generate` writes over the inputs): forced positions of the layout, and one-hot logits.

Forced ids get logit 0 and every other id -inf, as the delay processor writes them; the
engine's temperature, top-k and top-p (which transformers applies between rules 2 and 3)
leave such a row unchanged. transformers clamps temperatures below 1 to 1 for Dia; mmspec
samples at the temperature it is given (`DiaPipeline` refuses those below 1).

The engine ends a sequence at the first step whose first token is a stop id. Dia ends at
the step where the channel of the largest delay holds its EOS, so the layout lists that
channel first (`DiaLM.order`); `channels()` puts decoded steps back in Dia's order.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.cache_utils import DynamicCache
from transformers.masking_utils import create_bidirectional_mask

from mmspec.core.contracts import CallTree, GuidedLogits
from mmspec.core.layout import TokenLayout
from mmspec.models.adapters.delay import codebook_delays, delay_pattern, undelay
from mmspec.models.adapters.musicgen import SlotEncoderDecoderCache
from mmspec.models.cache.attention import invariant_attention
from mmspec.models.cache.hf_session import SlotCache, additive_mask, allocate_cache, check_attention_kernel
from mmspec.models.cache.kv_cache import CachedSession

NEVER = 2**62  # a decoder position no sequence reaches: "channel 0 has not ended"


def dia_guidance(cond: torch.Tensor, uncond: torch.Tensor, scale: float, top_k: int | None) -> torch.Tensor:
    """transformers' `DiaClassifierFreeGuidanceLogitsProcessor` on float32 logits `[..., V]`:
    `c + s * (c - u)`, or with `top_k` the conditional logits kept on the top-k of those."""
    guided = cond + (cond - uncond) * scale
    if top_k is None:
        return guided
    if top_k >= cond.shape[-1]:  # every id is in the top-k
        return cond
    out = torch.ones_like(guided, dtype=torch.bool).scatter(-1, torch.topk(guided, top_k, dim=-1).indices, False)
    return cond.masked_fill(out, float("-inf"))


def eos_channel_filter(scores: torch.Tensor, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' `DiaEOSChannelFilterLogitsProcessor` on `scores [..., C, V]` (Dia's channel
    order): ids from EOS up banned on channels 1.., above EOS on channel 0; then EOS is the
    only id of a channel where it is the arg-max, and banned where it is not. Also returns
    bool `[...]`: channel 0 holds EOS."""
    x = scores.clone()
    x[..., 1:, eos_id:] = float("-inf")
    x[..., 0, eos_id + 1:] = float("-inf")
    eos_top = (x.argmax(-1) == eos_id)[..., None]  # [..., C, 1]
    ids = torch.arange(x.shape[-1], device=x.device)
    x = x.masked_fill(eos_top & (ids < eos_id), float("-inf"))
    x = x.masked_fill(~eos_top & (ids == eos_id), float("-inf"))
    return x, eos_top[..., 0, 0]


def forced_logits(scores: torch.Tensor, forced: torch.Tensor) -> torch.Tensor:
    """`scores [..., V]` with the rows where `forced [...]` >= 0 set to 0 at the forced id and
    -inf elsewhere (as transformers' delay processor forces EOS)."""
    one_hot = torch.full_like(scores, float("-inf")).scatter_(-1, forced.clamp(min=0)[..., None], 0.0)
    return torch.where((forced >= 0)[..., None], one_hot, scores)


class DiaLM:
    """A `DiaForConditionalGeneration` as a TokenModel of `max_new_tokens` steps (Dia's
    `generate(max_new_tokens=...)`: the delayed tail included).

    The condition of `start` is the text as `DiaTokenizer` writes it for `generate` (`dict`
    of `input_ids` and `attention_mask` `[B, L]`, padded on the right); decode with
    `stop_tokens=lm.stop_tokens, pad_token_id=lm.pad_id` and `guidance_scale=1` (Dia's
    guidance is the model's own, see the module docstring). The length is `max_new_tokens`,
    where Dia forces its end; `generate(max_length=...)` would cut clips before it.

    Args:
        model (`DiaForConditionalGeneration`): the model, loaded with the "sdpa" or "eager" kernel.
        max_new_tokens (`int`): steps generated at most, at least the largest delay + 1.
        guidance_scale (`float`, *optional*, defaults to 1.0): Dia's CFG scale s; 1 runs no
            unconditional rows, transformers refuses anything else below 1 (so do we).
        guidance_top_k (`int`, *optional*): Dia's guidance top-k (transformers takes the
            sampling `top_k`); None combines the rows as `c + s * (c - u)`.

    Example:
        >>> lm = DiaLM(model, 256, guidance_scale=3.0, guidance_top_k=45)  # doctest: +SKIP
        >>> tokens, stats = generate(lm, tokenizer(texts, padding=True, return_tensors="pt"), "auto",  # doctest: +SKIP
        ...                          SamplingConfig(temperature=1.2, top_k=45, top_p=0.95),
        ...                          stop_tokens=lm.stop_tokens, pad_token_id=lm.pad_id)
        >>> codes = lm.codes(tokens, stats.lengths)  # doctest: +SKIP
    """

    def __init__(self, model: nn.Module, max_new_tokens: int, *, guidance_scale: float = 1.0, guidance_top_k: int | None = None):
        if getattr(model.config, "model_type", None) != "dia":
            raise ValueError(f"DiaLM serves DiaForConditionalGeneration; got {getattr(model.config, 'model_type', None)!r}")
        decoder = model.config.decoder_config
        check_attention_kernel(decoder)
        self.delays = codebook_delays(model.config.delay_pattern)  # [C], Dia's channel order
        self.channel_count = decoder.num_channels
        if len(self.delays) != self.channel_count:
            raise ValueError(f"delay_pattern has {len(self.delays)} delays for {self.channel_count} channels")
        self.max_delay = int(self.delays.max())
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens <= self.max_delay:
            raise ValueError(f"max_new_tokens must be a whole number > the largest delay {self.max_delay}, got {max_new_tokens!r}")
        if not (guidance_scale == 1 or guidance_scale > 1) or guidance_scale == float("inf"):
            raise ValueError(f"Dia's guidance_scale must be 1 (off) or a finite number > 1, got {guidance_scale!r}")
        if guidance_top_k is not None and (isinstance(guidance_top_k, bool) or not isinstance(guidance_top_k, int) or guidance_top_k < 1):
            raise ValueError(f"guidance_top_k must be None or a whole number >= 1, got {guidance_top_k!r}")
        self.model, self.max_new_tokens = model, max_new_tokens
        self.guidance_scale, self.guidance_top_k = float(guidance_scale), guidance_top_k
        self.vocab_size = decoder.vocab_size
        self.eos_id, self.pad_id, self.bos_id = decoder.eos_token_id, decoder.pad_token_id, decoder.bos_token_id
        last = max(c for c in range(self.channel_count) if self.delays[c] == self.max_delay)
        self.order = torch.tensor([last] + [c for c in range(self.channel_count) if c != last])  # layout slot -> channel
        self.inverse = torch.argsort(self.order)  # channel -> layout slot

    @property
    def stop_tokens(self) -> tuple[int]:
        """EOS: in the layout's first slot (the channel of the largest delay) it ends a clip."""
        return (self.eos_id,)

    @property
    def guided(self) -> bool:
        return self.guidance_scale != 1

    def layout(self) -> TokenLayout:
        """`max_new_tokens` steps of C tokens over Dia's `vocab_size` ids; BOS forced before
        each channel's first frame; channels in `order`."""
        forced = delay_pattern(self.max_new_tokens, self.delays.tolist(), self.pad_id, start_id=self.bos_id, pad_end=False)
        return TokenLayout.grid((self.max_new_tokens,), self.vocab_size, axes=("step",), tokens_per_step=self.channel_count,
                                forced=forced[:, self.order])

    def start(self, condition: dict, *, guided: bool, extra_positions: int = 0) -> "DiaSession":
        if guided:
            raise ValueError("DiaLM applies Dia's own guidance (DiaLM(guidance_scale=...)); sample with guidance_scale=1")
        ids = condition.get("input_ids") if isinstance(condition, dict) else None
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.shape[1] == 0:
            raise ValueError("the condition must hold input_ids: a non-empty [batch, text length] tensor of byte ids")
        mask = condition.get("attention_mask")
        mask = torch.ones_like(ids) if mask is None else mask.long()
        return DiaSession(self, ids, mask, extra_positions=extra_positions)

    def channels(self, tokens: torch.Tensor) -> torch.Tensor:
        """Decoded steps `[B, T, C]` in the layout's order -> Dia's channel order (as
        transformers' `generate` returns them, without its leading BOS step)."""
        return tokens[..., self.inverse.to(tokens.device)]

    def codes(self, tokens: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor]:
        """DAC codes `[C, F]` of each decoded clip (`tokens [B, T, C]` in the layout's order,
        `lengths [B]` its steps, `DecodeStats.lengths`): frame f of channel c is step f + d_c,
        up to the frame of channel 0's EOS (`F = length - D - 1`), as `DiaProcessor.batch_decode`
        cuts them."""
        steps = self.channels(tokens)
        delays = self.delays.tolist()
        return [undelay(steps[b : b + 1, :n], delays, frames=n - self.max_delay - 1)[0] for b, n in enumerate(lengths.tolist())]


class DiaSession(CachedSession):
    """One call: the rows `[cond; uncond]` (uncond under guidance) of `batch_size` texts.
    Cache slot q holds decoder position q (the BOS step at 0), so the engine's position t is
    slot t + 1; scratch slots past the end serve windows and tree nodes. `fed [R, slots]` is
    the channel-0 token each slot was last fed and `fed_at` the decoder position it stood for
    (a tree node's, at a scratch slot): with the attention mask they say which channel-0 EOS
    an input sees (rule 3 of the module docstring).

    `guided` is True when the session runs unconditional rows (so that a forward's cost counts
    them); its forward returns them already combined by Dia's rule as `cond`."""

    supports_tree = True
    row_state = ("text", "text_mask", "fed", "fed_at")

    def __init__(self, lm: DiaLM, ids: torch.Tensor, mask: torch.Tensor, *, extra_positions: int = 0):
        model, B = lm.model, ids.shape[0]
        decoder = model.model.decoder
        w = decoder.norm.weight
        rows = 2 * B if lm.guided else B
        cache = allocate_cache(model.config.decoder_config, rows, 1 + lm.max_new_tokens + extra_positions, w.dtype, w.device)
        super().__init__(cache, 1, batch_size=B, guided=lm.guided, steps=lm.max_new_tokens)
        self.lm, self.decoder, self.head = lm, decoder, model.logits_dense
        ids, mask = ids.to(w.device), mask.to(w.device)
        if lm.guided:  # Dia's unconditional text: zeros under the same mask
            ids, mask = torch.cat([ids, torch.zeros_like(ids)]), torch.cat([mask, mask])
        self.text = model.model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        self.text_mask = mask
        self.cross, self.is_updated = DynamicCache(), {}
        self.delays = lm.delays.to(w.device)
        self.order = lm.order.to(w.device)
        self.inverse = lm.inverse.to(w.device)
        self.end_of_text = lm.max_new_tokens - lm.max_delay  # decoder position where channel 0 must end
        slots = self.cache.slots
        self.fed = torch.full((rows, slots), -1, dtype=torch.long, device=w.device)
        self.fed_at = torch.arange(slots, device=w.device).expand(rows, slots).clone()
        start = torch.full((rows, 1, lm.channel_count), lm.bos_id, dtype=torch.long, device=w.device)
        slot0 = torch.zeros(rows, 1, dtype=torch.long, device=w.device)
        self._prefill = GuidedLogits(self.run(start, slot0))
        self.cache.commit(slot0, torch.ones_like(slot0, dtype=torch.bool))

    def keep_rows(self, rows: torch.Tensor) -> None:
        """As every cached session; the kept rows' text keys and values are computed afresh
        by the next forward."""
        super().keep_rows(rows)
        self.cross, self.is_updated = DynamicCache(), {}

    def network_logits(self, tokens: torch.Tensor, slots: torch.Tensor, visible: torch.Tensor,
                       acts_as: torch.Tensor | None = None) -> torch.Tensor:
        """Dia's float32 logits `[R, n, C, V]` (channel order, every row) of steps `tokens [R,
        n, C]` written at `slots [R, n]` (standing for `acts_as`), seeing `visible [R, 1, n, S]`."""
        d = self.decoder
        at = slots if acts_as is None else acts_as
        h = d.embeddings(tokens)
        rope = d.rotary_emb(h, position_ids=at)
        mask = additive_mask(visible, h.dtype)
        cross_mask = create_bidirectional_mask(config=d.config, inputs_embeds=h, attention_mask=self.text_mask,
                                               encoder_hidden_states=self.text)
        cache = SlotEncoderDecoderCache(SlotCache(self.cache, slots), self.cross, self.is_updated)
        with invariant_attention(h.dtype, h.device):  # in half precision on a CPU: the same per query whatever the window
            for layer in d.layers:
                h = layer(h, rope, mask, self.text, encoder_attention_mask=cross_mask, cache=cache)
        R, n, C = tokens.shape
        return self.head(d.norm(h)).view(R, n, C, -1).float()  # transformers' generate processes float32 logits

    def run(self, tokens: torch.Tensor, slots: torch.Tensor, segments: torch.Tensor | None = None,
            acts_as: torch.Tensor | None = None, visible: torch.Tensor | None = None) -> torch.Tensor:
        """Dia's rules applied to the logits of `tokens [R, n, C]` (channel order) at `slots`:
        `[B, n, C, V]` in the layout's order."""
        lm, B = self.lm, self.batch_size
        at = slots if acts_as is None else acts_as
        self.fed.scatter_(1, slots, tokens[..., 0])
        self.fed_at.scatter_(1, slots, at)
        seen = self.cache.attention_mask(slots, segments, None, acts_as, visible)  # [R, 1, n, S]
        logits = self.network_logits(tokens, slots, seen, acts_as)
        # 1. guidance
        scores = logits[:B]
        if lm.guided:
            scores = dia_guidance(scores, logits[B:], lm.guidance_scale, lm.guidance_top_k)
        # 2. the EOS channel filter
        scores, eos_now = eos_channel_filter(scores, lm.eos_id)
        # 3. the delayed tail: channel 0's end, from the EOS the input sees, this step's, or the length
        S = seen.shape[-1]
        eos_seen = seen[:B, 0] & (self.fed[:B, None, :S] == lm.eos_id)  # [B, n, S]
        ended = torch.where(eos_seen, self.fed_at[:B, None, :S], NEVER).amin(-1)  # [B, n]
        p = at[:B] + 1  # the decoder position each input predicts
        ended = torch.minimum(torch.minimum(ended, torch.where(eos_now, p, NEVER)), torch.full_like(p, self.end_of_text))
        channel_end = ended[..., None] + self.delays  # [B, n, C]: where each channel holds its EOS
        p = p[..., None]
        forced = torch.where(p < channel_end, -1, torch.where(p == channel_end, lm.eos_id, lm.pad_id))
        # 4. BOS before each channel's first frame
        forced = torch.where(p <= self.delays, lm.bos_id, forced)
        return forced_logits(scores, forced)[..., self.order, :]

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, segments: torch.Tensor | None = None,
                tree: CallTree | None = None) -> GuidedLogits:
        self.check_inputs(tokens[..., 0], positions)
        segs, acts_as, visible = self.call_views(segments, tree)
        steps = self.rows(tokens[..., self.inverse])  # Dia's channel order
        return GuidedLogits(self.run(steps, self.slots(positions), segs, acts_as, visible))

    def relocate(self, sources: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> None:
        """As every cached session, with the channel-0 tokens the moved slots were fed."""
        super().relocate(sources, positions, mask)
        src, dst, keep = self.slots(sources), self.slots(positions), self.rows(mask.bool())
        rows = torch.arange(len(dst), device=dst.device)[:, None].expand_as(dst)[keep]
        for buffer in (self.fed, self.fed_at):
            buffer[rows, dst[keep]] = buffer[rows, src[keep]]
