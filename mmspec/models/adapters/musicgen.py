"""transformers' MusicGen, unmodified, as a `TokenModel` of K codebooks per step.

MusicGen's decoder predicts K codebook tokens per step under the *delay pattern*: codebook
k runs k steps behind codebook 0, so that step t holds frame t - k of codebook k, and the
pattern's corners hold the pad id (`vocab_size`, which the embeddings have and the heads
do not). The layout carries the codec's codebook vectors for grouped acceptance (`pcg`).
The pattern belongs to the layout, not to the engine: the pad slots are forced
positions of a `TokenLayout` of K tokens per step over `vocab_size + 1` ids, whose last id
no unforced slot allows (`mmspec.models.adapters.delay`, shared with Dia). `undelay` turns a
decoded `[B, T, K]` back into EnCodec's codes.

The decoder computes its sinusoidal positions from the cache length, which fits no window
of drafts, so we run its layers ourselves (as `hf_session` does for Llama-style stacks):
summed codebook embeddings plus the sinusoid at each input's own position, the layers with
our committed-slot mask, `SlotCache` for self-attention and the text's keys and values
cached once for cross-attention, then the K heads. The text encoder, its projection and
classifier-free guidance (a zero "null" text, as `generate` builds it) are MusicGen's own.

The conditioning is a callable, so that the same adapter serves MusicGen checkpoints (T5
text) and the shipped speech model (a bare `MusicgenForCausalLM` and a `WordCondition`
table whose word state the decoder cross-attends to).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask

from mmspec.core.contracts import CallTree, GuidedLogits
from mmspec.core.layout import TokenLayout
from mmspec.models.adapters.delay import delay_pattern, undelay
from mmspec.models.cache.attention import invariant_attention
from mmspec.models.cache.hf_session import SlotCache, additive_mask, allocate_cache, check_attention_kernel
from mmspec.models.cache.kv_cache import CachedSession


class SlotEncoderDecoderCache(EncoderDecoderCache):
    """What MusicGen's attention layers read of an `EncoderDecoderCache`: our slot cache
    for self-attention, and the text's keys and values, written by the first forward and
    reused after it (`is_updated`)."""

    def __init__(self, self_attention: SlotCache, cross_attention: DynamicCache, is_updated: dict):
        self.self_attention_cache, self.cross_attention_cache, self.is_updated = self_attention, cross_attention, is_updated


class T5Condition:
    """MusicGen's own conditioning: the text prompts (`input_ids`, `attention_mask`, the
    tokenizer's output) through its T5 encoder and `enc_to_dec_proj`, padding zeroed."""

    def __init__(self, model: nn.Module):
        self.model = model

    def __call__(self, condition: dict) -> tuple[torch.Tensor, torch.Tensor]:
        ids = condition.get("input_ids") if isinstance(condition, dict) else None
        if ids is None or ids.dim() != 2 or ids.shape[1] == 0:
            raise ValueError("input_ids must be a non-empty [batch, text length] tensor of token ids")
        mask = condition.get("attention_mask")
        mask = torch.ones_like(ids) if mask is None else mask.long()
        m = self.model
        text = m.text_encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        if m.text_encoder.config.hidden_size != m.decoder.config.hidden_size and m.decoder.config.cross_attention_hidden_size is None:
            text = m.enc_to_dec_proj(text)
        return text * mask[..., None], mask


class MusicgenLM:
    """A MusicGen decoder as a TokenModel of `max_new_tokens` steps.

    `model` is either a whole `MusicgenForConditionalGeneration` (the condition of `start`
    is the tokenizer's output for the text prompts, encoded by its T5; codebook vectors and
    `decode_audio` from its EnCodec), or a bare `MusicgenForCausalLM` given a `condition`:
    any callable from what `start` receives to the decoder's `encoder_hidden_states [B, L,
    hidden]` and their mask `[B, L]` (`WordCondition` for the shipped speech model), and
    optionally the `codebook_vectors [K, V, E]` of its codec for grouped acceptance.
    """

    def __init__(self, model: nn.Module, max_new_tokens: int, *, condition=None, codebook_vectors: torch.Tensor | None = None):
        model_type = getattr(model.config, "model_type", None)
        if model_type == "musicgen":
            self.decoder, self.condition = model.decoder, condition or T5Condition(model)
        elif model_type == "musicgen_decoder":
            if condition is None:
                raise ValueError("a bare MusicgenForCausalLM needs condition=: a callable giving its encoder_hidden_states and mask")
            self.decoder, self.condition = model, condition
        else:
            raise ValueError(f"MusicgenLM serves MusicgenForConditionalGeneration or MusicgenForCausalLM; got {model_type!r}")
        if self.decoder.config.audio_channels != 1:
            raise ValueError("stereo MusicGen (audio_channels=2) interleaves its codebooks; mmspec serves mono checkpoints")
        check_attention_kernel(self.decoder.config)
        self.codebooks = self.decoder.num_codebooks
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < self.codebooks:
            raise ValueError(f"max_new_tokens must be a whole number >= the {self.codebooks} codebooks, got {max_new_tokens!r}")
        self.model, self.max_new_tokens = model, max_new_tokens
        self.pad_id = self.decoder.config.vocab_size  # the embeddings' extra row
        self._codebook_vectors = codebook_vectors

    @property
    def max_steps(self) -> int:
        """The most steps the decoder's sinusoidal position table reaches (position 0 is the start token)."""
        return self.decoder.model.decoder.embed_positions.weights.shape[0] - 1

    def layout(self) -> TokenLayout:
        allowed = torch.ones(self.pad_id + 1, dtype=torch.bool)
        allowed[self.pad_id] = False  # only the pattern's forced slots hold the pad id
        return TokenLayout.grid((self.max_new_tokens,), self.pad_id + 1, axes=("step",), tokens_per_step=self.codebooks,
                                allowed=allowed, forced=delay_pattern(self.max_new_tokens, self.codebooks, self.pad_id),
                                token_embeddings=self.codebook_vectors())

    def codebook_vectors(self) -> torch.Tensor | None:
        """`[K, V + 1, E]`: the codec's vector for each code of each codebook (zero for the
        pad id), the acoustic space grouped acceptance (`pcg`) clusters; EnCodec's for a
        whole MusicGen, those given for a bare decoder (None if none were)."""
        if self._codebook_vectors is not None:
            vectors = self._codebook_vectors.float()
        elif self.model is not self.decoder:
            quantizer = self.model.audio_encoder.quantizer.layers[: self.codebooks]
            vectors = torch.stack([layer.codebook.embed.float() for layer in quantizer])
        else:
            return None
        return torch.cat([vectors, vectors.new_zeros(self.codebooks, 1, vectors.shape[-1])], 1)

    def start(self, condition, *, guided: bool, extra_positions: int = 0) -> "MusicgenSession":
        states, mask = self.condition(condition)
        return MusicgenSession(self.decoder, states, mask, guided=guided, steps=self.max_new_tokens, extra_positions=extra_positions)

    def frames(self, tokens: torch.Tensor) -> torch.Tensor:
        """Codec codes `[B, K, F]` of decoded steps `[B, T, K]`."""
        return undelay(tokens, self.codebooks)

    @torch.no_grad()
    def decode_audio(self, tokens: torch.Tensor) -> torch.Tensor:
        """Waveforms `[B, 1, samples]` of decoded steps, by MusicGen's EnCodec."""
        if self.model is self.decoder:
            raise ValueError("a bare MusicgenForCausalLM has no EnCodec: decode frames(tokens) with its own codec")
        codes = self.frames(tokens)
        return self.model.audio_encoder.decode(codes[None], audio_scales=[None] * len(codes)).audio_values


class MusicgenSession(CachedSession):
    """One call: the rows `[cond; uncond]` of `batch_size` conditions, given as the
    decoder's `encoder_hidden_states [B, L, hidden]` and mask `[B, L]`; decoder position 0
    holds the start token, generated step t sits at position t + 1. The engine's scratch
    slots past the end (padding inputs, whose logits nobody reads) take the last sinusoid,
    so that the decoder's position table need only cover the steps. Tree attention
    (`CallTree`, for branches): an input written at a scratch slot takes the sinusoid and
    the view of the position it stands for."""

    supports_tree = True
    row_state = ("text", "text_mask")

    def __init__(self, model: nn.Module, states: torch.Tensor, mask: torch.Tensor, *, guided: bool, steps: int,
                 extra_positions: int = 0):
        B = states.shape[0]
        decoder = model.model.decoder
        super().__init__(allocate_cache(decoder.config, 2 * B if guided else B, 1 + steps + extra_positions, decoder.layer_norm.weight.dtype,
                                        states.device), 1, batch_size=B, guided=guided, steps=steps)
        self.decoder, self.heads = decoder, model.lm_heads
        text, mask = states, mask.long()
        if guided:  # MusicGen's null condition: zero states, nothing to attend
            text, mask = torch.cat([text, torch.zeros_like(text)]), torch.cat([mask, torch.zeros_like(mask)])
        self.text, self.text_mask = text, mask
        self.cross, self.is_updated = DynamicCache(), {}
        self.last_position = decoder.embed_positions.weights.shape[0] - 1
        if steps > self.last_position:
            raise ValueError(f"{steps} steps exceed the decoder's {self.last_position} positions")
        rows = self.cache.rows
        start = torch.full((rows, 1, decoder.num_codebooks), model.config.decoder_start_token_id, device=states.device)
        slot0 = torch.zeros(rows, 1, dtype=torch.long, device=states.device)
        logits = self.run(start, slot0)
        self.cache.commit(slot0, torch.ones_like(slot0, dtype=torch.bool))
        self._prefill = self.split(logits)

    def keep_rows(self, rows: torch.Tensor) -> None:
        """As every cached session; the kept rows' text keys and values are computed afresh
        by the next forward."""
        super().keep_rows(rows)
        self.cross, self.is_updated = DynamicCache(), {}

    def run(self, tokens: torch.Tensor, slots: torch.Tensor, segments: torch.Tensor | None = None,
            acts_as: torch.Tensor | None = None, visible: torch.Tensor | None = None) -> torch.Tensor:
        """Logits `[R, n, K, V + 1]` of steps `tokens [R, n, K]` at decoder positions `slots
        [R, n]` (standing for `acts_as`, seeing `visible` of the call: tree attention); the
        last id (pad) gets logit 0, which only forced slots allow."""
        d = self.decoder
        at = slots if acts_as is None else acts_as
        h = sum(d.embed_tokens[k](tokens[..., k]) for k in range(d.num_codebooks))
        h = h + d.embed_positions.weights[at.clamp_max(self.last_position)].to(h.dtype)
        mask = additive_mask(self.cache.attention_mask(slots, segments, None, acts_as, visible), h.dtype)
        cross_mask = create_bidirectional_mask(config=d.config, inputs_embeds=h, attention_mask=self.text_mask,
                                               encoder_hidden_states=self.text)
        cache = SlotEncoderDecoderCache(SlotCache(self.cache, slots), self.cross, self.is_updated)
        with invariant_attention(h.dtype, h.device):  # in half precision on a CPU: the same per query whatever the window
            for layer in d.layers:
                h = layer(h, mask, self.text, encoder_attention_mask=cross_mask, cache=cache, use_cache=True)
        h = d.layer_norm(h)
        logits = torch.stack([head(h) for head in self.heads], 2).float()  # [R, n, K, V]
        return torch.cat([logits, logits.new_zeros(*logits.shape[:-1], 1)], -1)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, segments: torch.Tensor | None = None,
                tree: CallTree | None = None) -> GuidedLogits:
        self.check_inputs(tokens[..., 0], positions)
        segs, acts_as, visible = self.call_views(segments, tree)
        return self.split(self.run(self.rows(tokens), self.slots(positions), segs, acts_as, visible))


class WordCondition(nn.Module):
    """A word table as MusicGen's condition: word i is one learned state `[1, hidden]` the
    decoder cross-attends to, in the place of T5's encoding of a text."""

    def __init__(self, words: list[str], hidden_size: int):
        super().__init__()
        if not words or len(set(words)) != len(words):
            raise ValueError(f"words must be a non-empty list of distinct strings, got {words!r}")
        self.words = list(words)
        self.embedding = nn.Embedding(len(words), hidden_size)

    @property
    def config(self) -> dict:
        return {"words": self.words, "hidden_size": self.embedding.embedding_dim}

    def word_ids(self, words: list[str]) -> torch.Tensor:
        """Long `[B]` ids of `words`; an unknown word is refused."""
        unknown = next((w for w in words if w not in self.words), None)
        if unknown is not None:
            raise ValueError(f"unknown word {unknown!r}; this model speaks {', '.join(self.words)}")
        return torch.tensor([self.words.index(w) for w in words], device=self.embedding.weight.device)

    def forward(self, word_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`word_ids [B]` -> states `[B, 1, hidden]` and their attention mask `[B, 1]`."""
        return self.embedding(word_ids)[:, None], torch.ones(len(word_ids), 1, dtype=torch.long, device=word_ids.device)
