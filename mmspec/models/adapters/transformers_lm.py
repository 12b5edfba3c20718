"""Any transformers causal LM or VLM, unmodified, as a `TokenModel`.

We call the model's own top-level `forward` and give it three things it already accepts:

* `cache`: a `SlotCache` over our `StaticKVCache`: every attention layer writes its keys
  and values at this forward's slots and reads the whole buffer;
* `attention_mask`: a 4-D additive mask (transformers uses a 4-D mask as given), the
  committed-slot mask of `StaticKVCache.attention_mask`;
* `position_ids`: each query's own position (a window's drafts sit at their sequence
  positions whatever the order they are fed in). Qwen2-VL gets its three-axis positions.

So embeddings, position embeddings (rotary, OPT's learned offset-2 table, GPT-2's), image
features merged in the prefill (LLaVA, Qwen2-VL) and the LM head are the model's own code.
The cache holds, per row, the left-padded prompt in slots `[0, P)` and generated position
t in slot `P + t`; a row with m real prompt tokens gives position t the position id m + t
(Qwen2-VL: one past the largest id of its prompt), as `generate` does.
"""

from __future__ import annotations

import torch
from torch import nn

from mmspec.core.contracts import CallTree, GuidedLogits
from mmspec.core.layout import TokenLayout
from mmspec.models.cache.attention import invariant_attention
from mmspec.models.cache.hf_session import SlotCache, check_attention_kernel, additive_mask, allocate_cache, cache_kwarg
from mmspec.models.cache.kv_cache import CachedSession

TEXT_FAMILIES = ("llama", "qwen2", "mistral", "opt", "gpt2")
VLM_FAMILIES = ("llava", "qwen2_vl")
FAMILIES = TEXT_FAMILIES + VLM_FAMILIES
LEARNED_POSITIONS = ("opt", "gpt2")  # position embedding tables of a fixed length
MROPE_FAMILIES = ("qwen2_vl",)  # three-axis (time, height, width) rotary positions
# prefill-only inputs a VLM takes beside input_ids
VISION_INPUTS = ("pixel_values", "image_sizes", "image_grid_thw", "video_grid_thw", "pixel_values_videos", "mm_token_type_ids")


def check_model(model: nn.Module) -> None:
    """Raises a ValueError naming what mmspec cannot serve: the family or the attention kernel."""
    family = getattr(model.config, "model_type", None)
    if family not in FAMILIES:
        raise ValueError(f"mmspec serves transformers models of the families {', '.join(FAMILIES)}; got {family!r}")
    check_attention_kernel(model.config.get_text_config())


def placeholder_ids(config) -> list[int]:
    """Token ids that stand for image or video features in a VLM's prompt: nothing a
    lookup drafter should copy."""
    names = ("image_token_id", "image_token_index", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    return [int(getattr(config, n)) for n in names if getattr(config, n, None) is not None]


class TransformersLM:
    """A transformers causal LM (`LlamaForCausalLM`, `OPTForCausalLM`, ...) or VLM
    (`LlavaForConditionalGeneration`, `Qwen2VLForConditionalGeneration`) as a TokenModel.

    The condition of `start` is the dict a processor or tokenizer returns: `input_ids`
    and `attention_mask` `[B, P]` (left padding), plus the VLM's image inputs.

    Example:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> from mmspec import generate
        >>> lm = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
        ...                                   num_hidden_layers=1, num_attention_heads=2)).eval()
        >>> model = TransformersLM(lm, max_new_tokens=8)
        >>> prompt = {"input_ids": torch.tensor([[1, 2, 3]])}
        >>> tokens, stats = generate(model, prompt, "mc-sjd", generator=torch.Generator().manual_seed(0))
        >>> tokens.shape
        torch.Size([1, 8])
    """

    def __init__(self, model: nn.Module, max_new_tokens: int = 256, allowed: torch.Tensor | None = None):
        check_model(model)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a whole number >= 1, got {max_new_tokens!r}")
        self.model, self.max_new_tokens, self.allowed = model, max_new_tokens, allowed

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    def layout(self) -> TokenLayout:
        """`max_new_tokens` positions in a line (axis "step"); `allowed` (bool `[V]` or
        `[T, V]`) restricts the tokens each may hold."""
        return TokenLayout.grid((self.max_new_tokens,), self.vocab_size, axes=("step",), allowed=self.allowed)

    def start(self, condition: dict, *, guided: bool = False, extra_positions: int = 0) -> "TransformersSession":
        if guided:
            raise ValueError("classifier-free guidance is not available for transformers language models; use guidance_scale=1")
        return TransformersSession(self.model, condition, self.max_new_tokens, extra_positions)


class TransformersSession(CachedSession):
    """One decoding call of a `TransformersLM` over `batch_size` left-padded prompts.

    Tree attention (`CallTree`) goes through the same two inputs: a candidate stands for
    its position by its position id, and sees what its row of `visible` names."""

    supports_tree = True
    row_state = ("first_position",)

    def __init__(self, model: nn.Module, condition: dict, max_new_tokens: int, extra_positions: int):
        ids = condition.get("input_ids")
        if ids is None or ids.dim() != 2 or ids.shape[1] == 0:
            raise ValueError("input_ids must be a non-empty [batch, prompt length] tensor of token ids")
        mask = condition.get("attention_mask")
        mask = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
        if mask.shape != ids.shape:
            raise ValueError(f"attention_mask {tuple(mask.shape)} and input_ids {tuple(ids.shape)} differ in shape")
        if not bool(mask.any(1).all()):
            raise ValueError("every prompt needs at least one token; got an empty (all-padding) prompt")
        if not bool(mask[:, -1].all()):
            raise ValueError("every prompt must end in its last column: pad prompts on the left (padding_side='left')")
        B, P = ids.shape
        config = model.config.get_text_config()
        check_context(config, P + max_new_tokens)
        slots = P + max_new_tokens + extra_positions
        super().__init__(allocate_cache(config, B, slots, model.dtype, ids.device), P, batch_size=B, guided=False,
                         steps=max_new_tokens)
        # learned position tables (OPT, GPT-2) end: scratch positions past the end reuse the last id
        self.max_position_id = config.max_position_embeddings - 1 if config.model_type in LEARNED_POSITIONS else None
        self.model, self.cache_arg = model, cache_kwarg(type(model))
        self.mrope = model.config.model_type in MROPE_FAMILIES
        placeholders = torch.tensor(placeholder_ids(model.config), dtype=torch.long, device=ids.device)
        self.prompt_tokens = ids.masked_fill(~mask | torch.isin(ids, placeholders), -1)

        positions = self.prompt_positions(ids, mask, condition)  # [B, P], or [3, B, P] under M-RoPE
        valid_positions = positions.masked_fill(~mask, -1)
        self.first_position = (valid_positions.amax((0, 2)) if self.mrope else valid_positions.amax(1)) + 1  # [B]
        vision = {k: condition[k] for k in VISION_INPUTS if condition.get(k) is not None}
        prompt_slots = torch.arange(P, device=ids.device).expand(B, P)
        logits = self.run(dict(input_ids=ids, **vision), positions, prompt_slots, key_valid=mask)
        self.cache.commit(prompt_slots, mask)
        self._prefill = GuidedLogits(logits[:, -1:])

    def prompt_positions(self, ids: torch.Tensor, mask: torch.Tensor, condition: dict) -> torch.Tensor:
        if self.mrope and condition.get("mm_token_type_ids") is not None:
            grids = {k: condition.get(k) for k in ("image_grid_thw", "video_grid_thw")}
            positions, _ = self.model.model.get_rope_index(ids, condition["mm_token_type_ids"], attention_mask=mask.long(), **grids)
            return positions
        positions = (mask.long().cumsum(1) - 1).clamp(min=0)  # padding's ids are never seen
        return positions.expand(3, -1, -1) if self.mrope else positions

    def run(self, inputs: dict, position_ids: torch.Tensor, slots: torch.Tensor, segments=None, key_valid=None,
            acts_as=None, in_call=None) -> torch.Tensor:
        """float logits `[B, n, V]` of the model's forward on `inputs` written at `slots`
        (`acts_as`, `in_call`: tree attention, see `StaticKVCache.attention_mask`)."""
        visible = self.cache.attention_mask(slots, segments, key_valid, acts_as, in_call)
        with invariant_attention(self.cache.k.dtype, self.cache.k.device):  # in half precision on a CPU (attention.py)
            out = self.model(
                **inputs,
                attention_mask=additive_mask(visible, self.model.dtype),
                position_ids=position_ids,
                use_cache=True,
                **{self.cache_arg: SlotCache(self.cache, slots)},
            )
        return out.logits.float()

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, segments: torch.Tensor | None = None,
                tree: CallTree | None = None) -> GuidedLogits:
        self.check_inputs(tokens, positions)
        stands_for = positions if tree is None else tree.acts_as
        position_ids = self.first_position[:, None] + stands_for
        if self.max_position_id is not None:
            position_ids = position_ids.clamp(max=self.max_position_id)
        if self.mrope:
            position_ids = position_ids.expand(3, -1, -1)
        tree_args = {} if tree is None else dict(acts_as=self.slots(tree.acts_as), in_call=tree.visible)
        return GuidedLogits(self.run(dict(input_ids=tokens), position_ids, self.slots(positions), segments, **tree_args))


def check_context(config, length: int) -> None:
    """Refuses a call whose tokens do not fit the model's sliding window or position table
    (the static cache keeps every token; a sliding window would drop old ones)."""
    window = getattr(config, "sliding_window", None)
    if window is not None and getattr(config, "use_sliding_window", True) and length > window:
        raise ValueError(
            f"this {config.model_type} model attends through a sliding window of {window} tokens, which mmspec's cache "
            f"does not implement; prompt + max_new_tokens = {length} must not exceed it"
        )
    if config.model_type in LEARNED_POSITIONS and length > config.max_position_embeddings:
        raise ValueError(f"prompt + max_new_tokens = {length} exceeds the model's {config.max_position_embeddings} positions")
