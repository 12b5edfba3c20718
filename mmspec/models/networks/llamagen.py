"""LlamaGen (Sun et al. 2024) as a TokenModel, checkpoint-compatible with the original.

Same numerics as FoundationVision/LlamaGen `autoregressive/models/gpt.py`: fused `wqkv`
(q|k|v), SwiGLU with hidden `find_multiple(int(2*4*dim/3), multiple_of)`, RMSNorm computed
in float32, and the 2-D RoPE whose rows for the condition prefix are all zero, so prefix
queries and keys are zero vectors (they attend uniformly and are attended with score 0).
The condition is a class label (c2i; the extra table row is the CFG null class) or a
sequence of caption features (t2i; `uncond_embedding` is the null caption).

Differences from the original, all invisible in the logits: the KV cache is per call
(`LlamaGenSession`) and masks uncommitted slots (see `kv_cache.py`); positions may differ
per batch row; dropout and drop-path are not implemented (inference and our small
trainings do not use them); the null caption has `cls_token_num` rows instead of a
hard-coded 120, so tiny t2i configs work.

Example:
    >>> import torch
    >>> from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT
    >>> model = LlamaGenGPT(LlamaGenConfig(dim=64, n_layer=2, n_head=4, vocab_size=64, block_size=16, num_classes=10))
    >>> session = model.start(torch.tensor([3, 7]), guided=True)
    >>> session.prefill_logits().cond.shape
    torch.Size([2, 1, 64])
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mmspec.utils.checkpoint import DeviceDtypeMixin, JSONConfig, load_into, read_state_dict
from mmspec.core.contracts import CallTree, GuidedLogits
from mmspec.core.layout import TokenLayout
from mmspec.models.cache.attention import attention
from mmspec.models.cache.kv_cache import CachedSession, StaticKVCache
from mmspec.models.networks.lpd import is_lpd_state_dict


def find_multiple(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - (n % k)


@dataclass
class LlamaGenConfig(JSONConfig):
    """The original `ModelArgs`, same field names and defaults.

    Training-only fields (dropouts, `initializer_range`, `max_seq_len`) are accepted so
    that original configs load unchanged.
    """

    config_name = "LlamaGen config"
    size_keys = {"dim": "width", "n_layer": "layers", "n_head": "heads", "n_kv_head": "heads", "vocab_size": "vocabulary",
                 "block_size": "positions", "cls_token_num": "positions", "num_classes": "vocabulary"}

    dim: int = 4096
    n_layer: int = 32
    n_head: int = 32
    n_kv_head: int | None = None
    multiple_of: int = 256  # SwiGLU hidden size is rounded up to a multiple of this
    ffn_dim_multiplier: float | None = None
    rope_base: float = 10000
    norm_eps: float = 1e-5
    initializer_range: float = 0.02
    token_dropout_p: float = 0.1
    attn_dropout_p: float = 0.0
    resid_dropout_p: float = 0.1
    ffn_dropout_p: float = 0.1
    drop_path_rate: float = 0.0
    num_classes: int = 1000
    caption_dim: int = 2048
    class_dropout_prob: float = 0.1  # > 0 adds the CFG null class row / null caption
    model_type: str = "c2i"
    vocab_size: int = 16384
    cls_token_num: int = 1  # prefix length: 1 for c2i, 120 T5 tokens for t2i
    block_size: int = 256  # image tokens; a perfect square (16x16 at 256 px with VQ-16)
    max_batch_size: int = 32  # rows of a cache from `allocate_cache()` by default
    max_seq_len: int = 2048

    # the factory names of the original code
    PRESETS = {
        "GPT-B": dict(n_layer=12, n_head=12, dim=768),
        "GPT-L": dict(n_layer=24, n_head=16, dim=1024),
        "GPT-XL": dict(n_layer=36, n_head=20, dim=1280),
        "GPT-XXL": dict(n_layer=48, n_head=24, dim=1536),
        "GPT-XXXL": dict(n_layer=48, n_head=40, dim=2560),
        "GPT-1B": dict(n_layer=22, n_head=32, dim=2048),
        "GPT-3B": dict(n_layer=24, n_head=32, dim=3200),
        "GPT-7B": dict(n_layer=32, n_head=32, dim=4096),
    }

    def __post_init__(self):
        if self.model_type not in ("c2i", "t2i"):
            raise ValueError(f"model_type {self.model_type!r} is not one of 'c2i', 't2i'")
        if self.dim % self.n_head:
            raise ValueError(f"dim {self.dim} is not divisible by n_head {self.n_head}")
        if self.head_dim % 4:
            raise ValueError(f"head_dim {self.head_dim} must be a multiple of 4 for the 2-D RoPE")
        if self.n_head % self.kv_heads:
            raise ValueError(f"n_head {self.n_head} is not a multiple of n_kv_head {self.n_kv_head}")
        if math.isqrt(self.block_size) ** 2 != self.block_size:
            raise ValueError(f"block_size {self.block_size} is not a perfect square (the token grid is square)")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def grid_size(self) -> int:
        return math.isqrt(self.block_size)

    @property
    def ffn_dim(self) -> int:
        hidden = int(2 * 4 * self.dim / 3)
        if self.ffn_dim_multiplier is not None:
            hidden = int(self.ffn_dim_multiplier * hidden)
        return find_multiple(hidden, self.multiple_of)

    def weight_count(self) -> int:
        """Weights of a `LlamaGenGPT` of this config, and its rotary table."""
        attention = self.dim * (self.n_head + 2 * self.kv_heads) * self.head_dim + self.dim * self.dim
        layer = attention + 3 * self.dim * self.ffn_dim + 2 * self.dim
        if self.model_type == "c2i":
            condition = (self.num_classes + 1) * self.dim
        else:
            condition = self.caption_dim * self.dim + self.dim * self.dim + self.cls_token_num * self.caption_dim
        rope = (self.cls_token_num + self.block_size) * self.head_dim
        return self.n_layer * layer + 2 * self.vocab_size * self.dim + condition + self.dim + rope

    @classmethod
    def from_name(cls, name: str, **overrides) -> "LlamaGenConfig":
        """A named size of the original (`"GPT-B"` ... `"GPT-7B"`), with field overrides."""
        if name not in cls.PRESETS:
            raise ValueError(f"unknown LlamaGen config {name!r}; choose from {', '.join(cls.PRESETS)}")
        return cls.from_dict({**cls.PRESETS[name], **overrides})


@dataclass
class CaptionCondition:
    """A t2i condition: caption features `embeds [B, P, caption_dim]` (T5 last hidden state,
    left-padded as the original sampler does) and `mask [B, P]` (1 where valid)."""

    embeds: torch.Tensor
    mask: torch.Tensor | None = None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        if x.dtype == torch.float32:  # the same math, the weight folded into the one call
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # normalized in float32 and rounded back before the weight, as in the original
        return F.rms_norm(x.float(), self.weight.shape, eps=self.eps).type_as(x) * self.weight


def rope_2d(grid_size: int, head_dim: int, base: float, prefix_len: int) -> torch.Tensor:
    """`[prefix_len + grid_size**2, head_dim // 2, 2]` (cos, sin) of LlamaGen's 2-D RoPE.

    The first half of the rotated pairs turns with the row index, the second with the
    column index (row-major positions); prefix rows are all zero, as in the original.
    """
    half = head_dim // 2
    freqs = 1.0 / (base ** (torch.arange(0, half, 2)[: half // 2].float() / half))
    angles = torch.outer(torch.arange(grid_size).float(), freqs)  # [G, head_dim // 4]
    grid = torch.cat(
        [angles[:, None, :].expand(-1, grid_size, -1), angles[None, :, :].expand(grid_size, -1, -1)], dim=-1
    )  # [G, G, head_dim // 2]
    table = torch.stack([grid.cos(), grid.sin()], dim=-1).flatten(0, 1)
    return torch.cat([torch.zeros(prefix_len, half, 2), table])


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Rotates interleaved pairs of `x [B, n, H, D]` by the unit complex numbers `rope
    [B or 1, n, 1, D/2]`, in float32: (x0 + i x1) (cos + i sin) is the original's
    (x0 cos - x1 sin, x1 cos + x0 sin) in one kernel instead of eight."""
    pairs = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
    return torch.view_as_real(pairs * rope).flatten(3).type_as(x)


def attention_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The additive bias (0 where `mask`, -inf elsewhere) that scaled_dot_product_attention
    would build from a bool mask at every layer; built once, it is shared by all of them."""
    return torch.full(mask.shape, float("-inf"), dtype=dtype, device=mask.device).masked_fill_(mask, 0.0)


def through_layers(layers, h: torch.Tensor, run, hidden_layers=None, last: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Runs `h` through `layers` (`run(layer, i, h)` runs layer i); returns the last output
    and, with `hidden_layers` (indices, negative from the end), those layers' outputs
    concatenated along the features (at the last position alone when `last`), else None.
    Draft heads read them."""
    wanted = [] if hidden_layers is None else [i % len(layers) for i in hidden_layers]
    outputs = {}
    for i, layer in enumerate(layers):
        h = run(layer, i, h)
        if i in wanted:
            outputs[i] = h[:, -1:] if last else h
    return h, (torch.cat([outputs[i] for i in wanted], -1) if wanted else None)


class Attention(nn.Module):
    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = config.n_head, config.kv_heads, config.head_dim
        self.wqkv = nn.Linear(config.dim, (config.n_head + 2 * config.kv_heads) * config.head_dim, bias=False)
        self.wo = nn.Linear(config.dim, config.dim, bias=False)

    def forward(self, x, rope, mask, cache: StaticKVCache | None = None, layer: int = 0, slots=None):
        B, n, dim = x.shape
        H, H_kv = self.n_head, self.n_kv_head
        qkv = self.wqkv(x).view(B, n, H + 2 * H_kv, self.head_dim)
        # queries and keys are adjacent heads of wqkv's output: one rotation turns both
        q, k = apply_rope(qkv[:, :, : H + H_kv], rope).transpose(1, 2).split([H, H_kv], dim=1)  # (B, H, n, D)
        v = qkv[:, :, H + H_kv :].transpose(1, 2)
        if cache is not None:
            k, v = cache.update(layer, slots, k, v)  # (B, H_kv, S, D)
        out = attention(q, k, v, mask, enable_gqa=H != H_kv)  # the same per query whatever the window (attention.py)
        return self.wo(out.transpose(1, 2).reshape(B, n, dim))


class FeedForward(nn.Module):
    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.ffn_dim, bias=False)
        self.w3 = nn.Linear(config.dim, config.ffn_dim, bias=False)
        self.w2 = nn.Linear(config.ffn_dim, config.dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        self.attention = Attention(config)
        self.feed_forward = FeedForward(config)
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)

    def forward(self, x, rope, mask, cache=None, layer=0, slots=None):
        h = x + self.attention(self.attention_norm(x), rope, mask, cache, layer, slots)
        return h + self.feed_forward(self.ffn_norm(h))


class LabelEmbedder(nn.Module):
    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        self.embedding_table = nn.Embedding(config.num_classes + int(config.class_dropout_prob > 0), config.dim)

    def forward(self, labels):  # [B] -> [B, 1, dim]
        return self.embedding_table(labels)[:, None]


class CaptionMLP(nn.Module):
    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.caption_dim, config.dim, bias=False)
        self.fc2 = nn.Linear(config.dim, config.dim, bias=False)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class CaptionEmbedder(nn.Module):
    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        self.cap_proj = CaptionMLP(config)
        self.register_buffer("uncond_embedding", torch.randn(config.cls_token_num, config.caption_dim) / config.caption_dim**0.5)

    def forward(self, captions):  # [B, P, caption_dim] -> [B, P, dim]
        return self.cap_proj(captions)


class LlamaGenGPT(DeviceDtypeMixin, nn.Module):
    """The LlamaGen transformer. `forward` is the teacher-forced pass used for training and
    scoring; `start` opens a cached `LlamaGenSession` for decoding."""

    # buffers that some original checkpoints carry and that are derived, not learned
    IGNORED_KEYS = ("freqs_cis", "causal_mask", ".kv_cache.k_cache", ".kv_cache.v_cache")

    def __init__(self, config: LlamaGenConfig):
        super().__init__()
        self.config = config
        c = config
        self.cls_embedding = LabelEmbedder(c) if c.model_type == "c2i" else CaptionEmbedder(c)
        self.tok_embeddings = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(TransformerBlock(c) for _ in range(c.n_layer))
        self.norm = RMSNorm(c.dim, c.norm_eps)
        self.output = nn.Linear(c.dim, c.vocab_size, bias=False)
        # a plain attribute, not a buffer: model.to(bfloat16) must not round it
        self._rope = torch.view_as_complex(self.rope_pairs())
        self.apply(self._init_weights)

    def rope_pairs(self) -> torch.Tensor:
        """The (cos, sin) table `[P + T, head_dim // 2, 2]` of the rotary positions."""
        c = self.config
        return rope_2d(c.grid_size, c.head_dim, c.rope_base, c.cls_token_num)

    def rope_table(self, device) -> torch.Tensor:
        """complex64 `[P + T, head_dim // 2]`: `rope_pairs()` as unit complex numbers."""
        self._rope = self._rope.to(device)
        return self._rope

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.initializer_range)

    @classmethod
    def from_checkpoint(cls, path_or_state_dict, config: LlamaGenConfig, container_key: str | None = None) -> "LlamaGenGPT":
        """Loads an original LlamaGen GPT checkpoint (`.pt`: bare, or under `model` /
        `module` / `state_dict`; or `.safetensors`) into a model of `config`.

        Example:
            >>> model = LlamaGenGPT.from_checkpoint("c2i_L_256.pt", LlamaGenConfig.from_name("GPT-L"))  # doctest: +SKIP
        """
        config.check_size()  # before the weights are allocated: 10**9 layers are refused, not built
        model = cls(config)
        state_dict = read_state_dict(path_or_state_dict, container_key)
        if is_lpd_state_dict(state_dict):
            raise ValueError("this is an LPD checkpoint (it has mask_token, fake_latent, z_proj_ln), not a LlamaGen GPT: "
                             "load it with mmspec.models.networks.lpd.LPD.from_checkpoint or LPDPipeline")
        load_into(model, state_dict, ignore=cls.IGNORED_KEYS, what="LlamaGen GPT checkpoint")
        return model.eval()

    @property
    def has_null_condition(self) -> bool:
        return self.config.model_type == "t2i" or self.config.class_dropout_prob > 0

    def layout(self, token_embeddings: torch.Tensor | None = None) -> TokenLayout:
        g = self.config.grid_size
        return TokenLayout.grid((g, g), self.config.vocab_size, token_embeddings=token_embeddings)

    # --- condition prefix -------------------------------------------------------------------

    def condition_prefix(self, condition) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Prefix embeddings `[B, P, dim]` and an optional validity mask `[B, P]` of a condition
        (class labels `[B]`; or a `CaptionCondition` / caption features `[B, P, caption_dim]`)."""
        c = self.config
        if c.model_type == "c2i":
            labels = torch.as_tensor(condition, device=self.output.weight.device)
            if labels.dtype.is_floating_point or labels.dim() != 1:
                raise ValueError(f"a c2i LlamaGen takes class labels as integers of shape [B], got {tuple(labels.shape)} {labels.dtype}")
            bad = labels[(labels < 0) | (labels >= c.num_classes)]
            if bad.numel():
                raise ValueError(f"class label {int(bad[0])} is out of range [0, {c.num_classes})")
            return self.cls_embedding(labels.long()), None
        if isinstance(condition, torch.Tensor):
            condition = CaptionCondition(condition)
        if not isinstance(condition, CaptionCondition):
            raise ValueError(f"a t2i LlamaGen takes caption features or a CaptionCondition, got {type(condition).__name__}")
        embeds = condition.embeds
        if embeds.dim() != 3 or embeds.shape[1:] != (c.cls_token_num, c.caption_dim):
            raise ValueError(
                f"caption features must be [B, {c.cls_token_num}, {c.caption_dim}], got {tuple(embeds.shape)}"
            )
        embeds = embeds.to(self.output.weight)
        mask = None if condition.mask is None else condition.mask.to(embeds.device).bool()
        return self.cls_embedding(embeds), mask

    def null_prefix(self, batch_size: int) -> torch.Tensor:
        """Prefix embeddings `[B, P, dim]` of the CFG null condition."""
        if not self.has_null_condition:
            raise ValueError("this c2i model has no null class (class_dropout_prob == 0), so guidance_scale must be 1")
        device = self.output.weight.device
        if self.config.model_type == "c2i":
            null = torch.full((batch_size,), self.config.num_classes, device=device)
            return self.cls_embedding(null)
        return self.cls_embedding(self.cls_embedding.uncond_embedding.expand(batch_size, -1, -1))

    # --- teacher-forced pass ----------------------------------------------------------------

    def forward(self, tokens: torch.Tensor, condition, condition_mask: torch.Tensor | None = None, hidden_layers=None):
        """Teacher-forced logits `[B, T, V]` of `tokens [B, T]`: row t predicts `tokens[:, t]`
        (row 0 from the last prefix position). Class labels may include the null class
        `num_classes` (label dropout for CFG training). With `hidden_layers`, also the
        outputs of those layers that gave each row, concatenated: `(logits, hidden [B, T, D])`."""
        c = self.config
        if c.model_type == "c2i":
            prefix = self.cls_embedding(torch.as_tensor(condition, device=tokens.device))
        else:
            prefix = self.cls_embedding(condition)
        P = c.cls_token_num
        h = torch.cat([prefix, self.tok_embeddings(tokens[:, :-1])], dim=1)
        n = h.shape[1]
        rope = self.rope_table(h.device)[None, :n, None]
        mask = None
        if condition_mask is not None:
            mask = torch.ones(n, n, dtype=torch.bool, device=h.device).tril()[None].repeat(h.shape[0], 1, 1)
            mask[:, :, :P] &= condition_mask.bool()[:, None, :]
            mask |= torch.eye(n, dtype=torch.bool, device=h.device)
            mask = attention_bias(mask[:, None], h.dtype)
        h, hidden = through_layers(self.layers, h, lambda layer, i, x: layer(x, rope, mask), hidden_layers)
        logits = self.output(self.norm(h)).float()[:, P - 1:]
        return logits if hidden_layers is None else (logits, hidden[:, P - 1:])

    # --- cached decoding --------------------------------------------------------------------

    def allocate_cache(self, max_batch_size: int | None = None, extra_positions: int = 0) -> StaticKVCache:
        """A cache for up to `max_batch_size` rows (CFG doubles the rows of a batch), reusable
        across calls of `start(..., cache=...)`."""
        rows = max_batch_size or self.config.max_batch_size
        c = self.config
        w = self.output.weight
        slots = c.cls_token_num + c.block_size + extra_positions
        return StaticKVCache(c.n_layer, rows, c.kv_heads, slots, c.head_dim, dtype=w.dtype, device=w.device)

    @torch.no_grad()
    def start(self, condition, *, guided: bool, extra_positions: int = 0, cache: StaticKVCache | None = None) -> "LlamaGenSession":
        """Prefills `condition` (and the null condition when `guided`) and returns the session.

        Args:
            condition: class labels `[B]` (c2i) or caption features / `CaptionCondition` (t2i).
            guided (`bool`): also run the null condition, for classifier-free guidance.
            extra_positions (`int`): scratch positions past the end, for overhanging windows.
            cache (`StaticKVCache`, *optional*): a preallocated cache to reuse.
        """
        c = self.config
        prefix, mask = self.condition_prefix(condition)
        B = prefix.shape[0]
        if B == 0:
            raise ValueError("the condition batch is empty")
        if guided:
            prefix = torch.cat([prefix, self.null_prefix(B)])
            if mask is not None:
                mask = torch.cat([mask, mask])  # the original masks both halves alike
        rows = prefix.shape[0]
        if cache is None:
            cache = self.allocate_cache(rows, extra_positions)
        else:
            if rows > cache.rows:
                raise ValueError(
                    f"batch of {rows} cache rows ({B} conditions{' x 2 for CFG' if guided else ''}) exceeds the "
                    f"allocated cache's {cache.rows}; allocate_cache(max_batch_size={rows})"
                )
            needed = c.cls_token_num + c.block_size + extra_positions
            if cache.slots < needed:
                raise ValueError(f"cache has {cache.slots} slots, this call needs {needed} (extra_positions={extra_positions})")
            cache.reset()
        return LlamaGenSession(self, cache, prefix, mask, batch_size=B, guided=guided)

    def _cached_forward(self, h, slots, cache, segments=None, key_valid=None, acts_as=None, visible=None,
                        hidden_layers=None, hidden_last=False):
        """Runs embeddings `h [R, n, dim]` at cache `slots [R, n]`; float logits `[R, n, V]`.
        `acts_as` and `visible`: tree attention (see `StaticKVCache.attention_mask`). With
        `hidden_layers` (layer indices), also the outputs of those layers, concatenated:
        `(logits, hidden [R, n, dim * len(hidden_layers)])` (`[R, 1, ...]`, the last input's,
        with `hidden_last`)."""
        table = self.rope_table(h.device)
        at = slots if acts_as is None else acts_as
        rope = table[at.clamp(max=table.shape[0] - 1), None]  # scratch slots past the grid reuse the last row
        mask = attention_bias(cache.attention_mask(slots, segments, key_valid, acts_as, visible), h.dtype)
        h, hidden = through_layers(self.layers, h, lambda layer, i, x: layer(x, rope, mask, cache, i, slots), hidden_layers,
                                   hidden_last)
        logits = self.output(self.norm(h)).float()
        return logits if hidden_layers is None else (logits, hidden)


class LlamaGenSession(CachedSession):
    """One decoding call: the cache rows `[cond; uncond]` of `batch_size` conditions."""

    supports_tree = True
    row_state = ("prefill_states",)

    def __init__(self, model: LlamaGenGPT, cache: StaticKVCache, prefix: torch.Tensor, prefix_mask, *, batch_size: int, guided: bool,
                 prefix_len: int | None = None, steps: int | None = None):
        # prefix_len and steps default to LlamaGen's; other models with the same `tok_embeddings`
        # and `_cached_forward` (Cosmos, whose prefix is conditioning frames) pass their own
        prefix_len = model.config.cls_token_num if prefix_len is None else prefix_len
        steps = model.config.block_size if steps is None else steps
        super().__init__(cache, prefix_len, batch_size=batch_size, guided=guided, steps=steps)
        self.model = model
        rows, P = prefix.shape[:2]
        slots = torch.arange(P, device=prefix.device).expand(rows, P)
        every_layer = range(len(model.layers))
        logits, hidden = model._cached_forward(prefix, slots, cache, key_valid=prefix_mask, hidden_layers=every_layer,
                                               hidden_last=True)
        valid = torch.ones_like(slots, dtype=torch.bool) if prefix_mask is None else prefix_mask
        cache.commit(slots, valid)
        self._prefill = self.split(logits[:, -1:])
        self.prefill_states = hidden.unflatten(-1, (len(model.layers), -1))  # [rows, 1, layers, dim]: what predicts position 0
        self.hidden_layers = None  # layer indices whose outputs forwards return (draft heads read them)

    def prefill_logits(self) -> GuidedLogits:
        if self.hidden_layers is None:
            return self._prefill
        hidden = self.prefill_states[:, :, list(self.hidden_layers)].flatten(2)
        return GuidedLogits(self._prefill.cond, self._prefill.uncond, hidden)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, segments: torch.Tensor | None = None,
                tree: CallTree | None = None) -> GuidedLogits:
        self.check_inputs(tokens, positions)
        h = self.model.tok_embeddings(self.rows(tokens))
        segs, acts_as, visible = self.call_views(segments, tree)
        out = self.model._cached_forward(h, self.slots(positions), self.cache, segs, None, acts_as, visible,
                                         hidden_layers=self.hidden_layers)
        if self.hidden_layers is None:
            return self.split(out)
        logits = self.split(out[0])
        logits.hidden = out[1]
        return logits
