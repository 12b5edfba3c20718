"""NVIDIA Cosmos-Predict1 autoregressive base models (4B, 12B) as a TokenModel.

Same numerics and parameter names as `cosmos_predict1/autoregressive/networks/transformer.py`
run as its base video-to-world inference runs it (`fuse_qkv=False`, PyTorch RoPE "v2",
no cross-attention, no absolute position embedding, tensor parallel size 1), so the
`model.pt` of `nvidia/Cosmos-Predict1-4B` / `-12B` loads unchanged after the original's own
key processing (a leading `model.` is dropped, TransformerEngine `_extra_state` entries
are skipped):

* separate `wq`, `wk`, `wv` (grouped KV heads), `wo`; `head_dim` may differ from
  `dim // n_heads` (128 for the 12B model, whose `dim` is 5120);
* QK normalization: an RMSNorm over each head of q and k, before the rotation. Its eps is
  the attention module's default 1e-5 (the original never passes `norm_eps` to it);
* RMSNorm computed in float32 and rounded back before the weight; SwiGLU MLP `w1`, `w3`, `w2`;
* the 3-D RoPE of the whole video latent `(T, H, W)`, TransformerEngine style (rotate
  halves, not interleaved pairs): of the `head_dim // 2` frequencies, `head_dim // 6`
  turn with the row, as many with the column and the rest with the frame, each group
  `1 / theta ** (2i / d_group)`; the cos/sin table is rounded to the activations' dtype
  before the rotation. The 12B model applies YaRN to those frequencies (scale 2, beta
  fast 4, slow 1, original latent shape (3, 40, 64): the spatial cut-offs use its H for
  both the row and the column). The "v2" RoPE applies no YaRN magnitude scale (mscale).

The sequence is the video's latent tokens in (frame, row, col) order, with no BOS or other
special token: the conditioning latent frames (1 for one input frame, 2 for nine) are the
prefix, prefilled at rotary positions `0 .. P-1`, and the generated frames follow at
`P ..`. Only the generated frames are the layout. There is no classifier-free guidance.

Example:
    >>> import torch
    >>> from mmspec.models.networks.cosmos import CosmosAR, CosmosARConfig
    >>> config = CosmosARConfig(dim=64, n_layers=1, n_heads=4, n_kv_heads=2, ffn_hidden_size=96, vocab_size=80, latent_shape=[3, 4, 4])
    >>> model = CosmosAR(config)
    >>> model.layout().shape, model.layout().axes
    ((2, 4, 4), ('frame', 'row', 'col'))
    >>> session = model.start(torch.zeros(2, 16, dtype=torch.long), guided=False)
    >>> session.prefill_logits().cond.shape
    torch.Size([2, 1, 80])
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, fields

import torch
import torch.nn.functional as F
from torch import nn

from mmspec.core.layout import TokenLayout
from mmspec.models.cache.attention import attention
from mmspec.models.cache.kv_cache import StaticKVCache
from mmspec.models.networks.llamagen import FeedForward, LlamaGenSession, RMSNorm, attention_bias, through_layers
from mmspec.utils.checkpoint import DeviceDtypeMixin, JSONConfig, first_line, load_into, read_state_dict


@dataclass
class CosmosARConfig(JSONConfig):
    """The fields of the original `ModelConfig` that shape the base network (same names,
    except `latent_shape`, the original's `video_latent_shape`)."""

    config_name = "Cosmos-Predict1 AR config"
    size_keys = {"dim": "width", "n_layers": "layers", "n_heads": "heads", "n_kv_heads": "heads", "head_dim": "width",
                 "vocab_size": "vocabulary", "ffn_hidden_size": "width"}

    dim: int = 4096
    n_layers: int = 16
    n_heads: int = 32
    n_kv_heads: int = 8
    head_dim: int | None = None  # None: dim // n_heads
    vocab_size: int = 64000  # the discrete video tokenizer's FSQ levels 8*8*8*5*5*5
    ffn_hidden_size: int = 14336
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0  # the ModelConfig default, which the video configs keep
    use_qk_normalization: bool = True
    latent_shape: list[int] = field(default_factory=lambda: [5, 40, 64])  # 33 frames of 640x1024 px, 8x16x16 tokenizer
    apply_yarn: bool = False
    yarn_scale: float | None = None
    yarn_beta_fast: float | None = None
    yarn_beta_slow: float | None = None
    original_latent_shape: list[int] | None = None  # the (T, H, W) the model was trained at before YaRN
    max_batch_size: int = 1  # cache rows from `allocate_cache()` by default

    PRESETS = {
        "4B": dict(n_layers=16, dim=4096, n_heads=32),
        "12B": dict(n_layers=40, dim=5120, n_heads=32, head_dim=128, apply_yarn=True, yarn_scale=2.0,
                    yarn_beta_fast=4.0, yarn_beta_slow=1.0, original_latent_shape=[3, 40, 64]),
    }

    def __post_init__(self):
        if len(self.latent_shape) != 3 or min(self.latent_shape) < 1:
            raise ValueError(f"latent_shape must be three positive sizes (T, H, W), got {self.latent_shape}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim is None and self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not divisible by n_heads {self.n_heads}; set head_dim")
        if self.rotary_dim % 2 or self.rotary_dim < 6:  # three groups of rotated pairs: frame, row, col
            raise ValueError(f"head_dim {self.rotary_dim} must be even and >= 6 for the 3-D RoPE")
        if self.apply_yarn and (self.original_latent_shape is None or len(self.original_latent_shape) != 3
                                or None in (self.yarn_scale, self.yarn_beta_fast, self.yarn_beta_slow)):
            raise ValueError("apply_yarn needs yarn_scale, yarn_beta_fast, yarn_beta_slow and a 3-entry original_latent_shape")

    @property
    def rotary_dim(self) -> int:
        return self.head_dim if self.head_dim is not None else self.dim // self.n_heads

    @property
    def ffn_dim(self) -> int:  # the name llamagen's FeedForward reads
        return self.ffn_hidden_size

    @property
    def sequence_length(self) -> int:
        T, H, W = self.latent_shape
        return T * H * W

    @property
    def frame_tokens(self) -> int:
        return self.latent_shape[1] * self.latent_shape[2]

    def weight_count(self) -> int:
        hd = self.rotary_dim
        attention = self.dim * (self.n_heads + 2 * self.n_kv_heads) * hd + self.n_heads * hd * self.dim
        layer = attention + 3 * self.dim * self.ffn_hidden_size + 2 * self.dim + 2 * hd * self.use_qk_normalization
        return self.n_layers * layer + 2 * self.vocab_size * self.dim + self.dim

    @classmethod
    def from_name(cls, name: str, **overrides) -> "CosmosARConfig":
        """`"4B"` or `"12B"` (Cosmos-Predict1-4B / -12B), with field overrides."""
        if name not in cls.PRESETS:
            raise ValueError(f"unknown Cosmos-Predict1 AR config {name!r}; choose from {', '.join(cls.PRESETS)}")
        return cls.from_dict({**cls.PRESETS[name], **overrides})


def yarn_factors(inv_freq: torch.Tensor, original_len: int, scale: float, beta_fast: float, beta_slow: float) -> torch.Tensor:
    """YaRN's per-frequency factors as the original computes them: 1 for frequencies that
    turn more than `beta_fast` times over `original_len` positions, `1/scale` for those
    turning fewer than `beta_slow` times, linear in the frequency between."""
    high = 2 * math.pi * beta_fast / original_len
    low = 2 * math.pi * beta_slow / original_len
    smooth = torch.clamp((inv_freq - low) / (high - low), min=0, max=1)
    return (1 - smooth) / scale + smooth


def rope_3d(config: CosmosARConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 (cos, sin), each `[T*H*W, head_dim]`: the rotation of every position of the
    latent video, row-major over (frame, row, col). A row's `head_dim` entries are the
    frequencies (frame | row | col) twice, for the halves that `rotate_half` pairs."""
    d = config.rotary_dim
    dim_h = d // 6 * 2
    dim_t = d - 2 * dim_h
    spatial = 1.0 / (config.rope_theta ** (torch.arange(0, dim_h, 2)[: dim_h // 2].float() / dim_h))
    temporal = 1.0 / (config.rope_theta ** (torch.arange(0, dim_t, 2)[: dim_t // 2].float() / dim_t))
    if config.apply_yarn:
        T0, H0, _ = config.original_latent_shape
        args = (config.yarn_scale, config.yarn_beta_fast, config.yarn_beta_slow)
        spatial = spatial * yarn_factors(spatial, H0, *args)  # the original uses H for both spatial axes
        temporal = temporal * yarn_factors(temporal, T0, *args)
    T, H, W = config.latent_shape
    seq = torch.arange(max(T, H, W), dtype=torch.float)
    t = torch.outer(seq[:T], temporal)[:, None, None, :].expand(T, H, W, -1)
    h = torch.outer(seq[:H], spatial)[None, :, None, :].expand(T, H, W, -1)
    w = torch.outer(seq[:W], spatial)[None, None, :, :].expand(T, H, W, -1)
    angles = torch.cat([t, h, w] * 2, dim=-1).reshape(T * H * W, d)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """TransformerEngine's rotation of `x [B, n, H, D]` by `cos, sin [B or 1, n, 1, D]`,
    in x's dtype: the first half of each head pairs with the second."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, config: CosmosARConfig):
        super().__init__()
        c = config
        self.n_heads, self.n_kv_heads, self.head_dim = c.n_heads, c.n_kv_heads, c.rotary_dim
        self.wq = nn.Linear(c.dim, c.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(c.dim, c.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(c.dim, c.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(c.n_heads * self.head_dim, c.dim, bias=False)
        self.use_qk_normalization = c.use_qk_normalization
        if c.use_qk_normalization:
            self.q_norm = RMSNorm(self.head_dim, 1e-5)  # the original's Attention default, not config.norm_eps
            self.k_norm = RMSNorm(self.head_dim, 1e-5)

    def forward(self, x, cos, sin, mask, cache: StaticKVCache | None = None, layer: int = 0, slots=None):
        B, n, _ = x.shape
        q = self.wq(x).view(B, n, self.n_heads, self.head_dim)
        k = self.wk(x).view(B, n, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(B, n, self.n_kv_heads, self.head_dim)
        if self.use_qk_normalization:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q, k = rotate(q, cos, sin).transpose(1, 2), rotate(k, cos, sin).transpose(1, 2)  # (B, H, n, D)
        v = v.transpose(1, 2)
        if cache is not None:
            k, v = cache.update(layer, slots, k, v)  # (B, H_kv, S, D)
        grouped = self.n_heads != self.n_kv_heads
        out = attention(q, k, v, mask, enable_gqa=grouped)  # the same per query whatever the window (attention.py)
        return self.wo(out.transpose(1, 2).reshape(B, n, -1))


class TransformerBlock(nn.Module):
    def __init__(self, config: CosmosARConfig):
        super().__init__()
        self.attention = Attention(config)
        self.feed_forward = FeedForward(config)
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)

    def forward(self, x, cos, sin, mask, cache=None, layer=0, slots=None):
        h = x + self.attention(self.attention_norm(x), cos, sin, mask, cache, layer, slots)
        return h + self.feed_forward(self.ffn_norm(h))


class CosmosAR(DeviceDtypeMixin, nn.Module):
    """The Cosmos-Predict1 AR transformer. `forward` is the teacher-forced pass over whole
    videos; `start(condition_tokens, guided=False)` prefills the conditioning latent frames
    and opens a cached session for the engine, whose layout is the generated frames.

    Args:
        config (`CosmosARConfig`): the network.
        condition_frames (`int`, *optional*, defaults to 1): latent frames given as the
            condition (the original uses 1 for a single input image, 2 for 9 input frames,
            its command line's default); the layout is the `T - condition_frames` frames
            that follow. It may be changed between calls.
    """

    def __init__(self, config: CosmosARConfig, condition_frames: int = 1):
        super().__init__()
        if not 1 <= condition_frames < config.latent_shape[0]:
            raise ValueError(f"condition_frames must be in [1, {config.latent_shape[0]}), got {condition_frames}")
        self.config = config
        self.condition_frames = condition_frames
        c = config
        self.tok_embeddings = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(TransformerBlock(c) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.dim, c.norm_eps)
        self.output = nn.Linear(c.dim, c.vocab_size, bias=False)
        # plain attributes, not buffers: model.to(bfloat16) must not round them (the
        # original makes them in float32 and rounds them to the activations' dtype at use)
        self._cos, self._sin = rope_3d(c)

    @classmethod
    def from_checkpoint(cls, path_or_state_dict, config: CosmosARConfig, condition_frames: int = 1) -> "CosmosAR":
        """A model of `config` with the weights of `path_or_state_dict` (the published
        `model.pt`, read with `weights_only=True`, or a `.safetensors`), keys processed as the
        original processes them; every name and shape checked."""
        config.check_size()  # before the weights are allocated
        model = cls(config, condition_frames)
        load_into(model, cosmos_state_dict(read_state_dict(path_or_state_dict)), what="Cosmos-Predict1 AR checkpoint")
        return model.eval()

    def rope(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        """float32 (cos, sin) `[T*H*W, head_dim]` of the full video's positions."""
        if self._cos.device != torch.device(device):
            self._cos, self._sin = self._cos.to(device), self._sin.to(device)
        return self._cos, self._sin

    @property
    def prefix_len(self) -> int:
        return self.condition_frames * self.config.frame_tokens

    def layout(self, token_embeddings: torch.Tensor | None = None) -> TokenLayout:
        T, H, W = self.config.latent_shape
        return TokenLayout.grid((T - self.condition_frames, H, W), self.config.vocab_size, token_embeddings=token_embeddings,
                                prompt_frames=self.condition_frames)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Teacher-forced float logits `[B, n, V]` of latent tokens `[B, n]` (the video from
        its first frame, n <= T*H*W); entry j predicts token j + 1."""
        n = tokens.shape[1]
        if n > self.config.sequence_length:
            raise ValueError(f"tokens has {n} positions, more than the video's {self.config.sequence_length}")
        h = self.tok_embeddings(tokens)
        cos, sin = (x[None, :n, None] for x in self.rope(h.device))
        for layer in self.layers:
            h = layer(h, cos, sin, None)
        return self.output(self.norm(h)).float()

    # --- cached decoding --------------------------------------------------------------------

    def allocate_cache(self, max_batch_size: int | None = None, extra_positions: int = 0) -> StaticKVCache:
        c = self.config
        w = self.output.weight
        rows = max_batch_size or c.max_batch_size
        return StaticKVCache(c.n_layers, rows, c.n_kv_heads, c.sequence_length + extra_positions, c.rotary_dim,
                             dtype=w.dtype, device=w.device)

    @torch.no_grad()
    def start(self, condition: torch.Tensor, *, guided: bool = False, extra_positions: int = 0,
              cache: StaticKVCache | None = None) -> LlamaGenSession:
        """Prefills the conditioning latent tokens and returns the session.

        Args:
            condition (`torch.Tensor`): long `[B, condition_frames * H * W]`, the tokens of
                the first latent frames in (frame, row, col) order.
            guided (`bool`): must be False; the base models have no null condition.
            extra_positions (`int`): scratch positions past the end, for overhanging windows.
            cache (`StaticKVCache`, *optional*): a preallocated cache to reuse.
        """
        if guided:
            raise ValueError("Cosmos-Predict1 base models have no classifier-free guidance; use guidance_scale=1")
        c = self.config
        tokens = torch.as_tensor(condition, device=self.output.weight.device)
        P = self.prefix_len
        if tokens.dim() != 2 or tokens.shape[1] != P or tokens.dtype.is_floating_point:
            raise ValueError(f"condition must be integer tokens [B, {P}] ({self.condition_frames} latent frames of "
                             f"{c.latent_shape[1]}x{c.latent_shape[2]}), got {tuple(tokens.shape)} {tokens.dtype}; "
                             f"set condition_frames to the number of frames given")
        if tokens.shape[0] == 0:
            raise ValueError("the condition batch is empty")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= c.vocab_size):
            raise ValueError(f"condition tokens must lie in [0, {c.vocab_size}), got [{int(tokens.min())}, {int(tokens.max())}]")
        B = tokens.shape[0]
        if cache is None:
            cache = self.allocate_cache(B, extra_positions)
        else:
            if B > cache.rows:
                raise ValueError(f"batch of {B} exceeds the allocated cache's {cache.rows} rows; allocate_cache(max_batch_size={B})")
            needed = c.sequence_length + extra_positions
            if cache.slots < needed:
                raise ValueError(f"cache has {cache.slots} slots, this call needs {needed} (extra_positions={extra_positions})")
            cache.reset()
        session = LlamaGenSession(self, cache, self.tok_embeddings(tokens.long()), None, batch_size=B, guided=False,
                                  prefix_len=P, steps=c.sequence_length - P)
        session.prompt_tokens = tokens.long()  # the same vocabulary: lookup drafters may copy from it
        return session

    def _cached_forward(self, h, slots, cache, segments=None, key_valid=None, acts_as=None, visible=None,
                        hidden_layers=None, hidden_last=False):
        """Runs embeddings `h [B, n, dim]` at cache `slots [B, n]` (slot = rotary position in
        the full video); float logits `[B, n, V]`, and with `hidden_layers` the outputs of
        those layers (as `LlamaGenGPT._cached_forward`)."""
        cos, sin = self.rope(h.device)
        at = (slots if acts_as is None else acts_as).clamp(max=cos.shape[0] - 1)  # scratch slots reuse the last row
        cos, sin = cos[at][:, :, None], sin[at][:, :, None]
        mask = attention_bias(cache.attention_mask(slots, segments, key_valid, acts_as, visible), h.dtype)
        h, hidden = through_layers(self.layers, h, lambda layer, i, x: layer(x, cos, sin, mask, cache, i, slots), hidden_layers,
                                   hidden_last)
        logits = self.output(self.norm(h)).float()
        return logits if hidden_layers is None else (logits, hidden)


def cosmos_state_dict(state_dict: dict) -> dict:
    """The original's key processing: TransformerEngine `_extra_state` entries are dropped
    and a leading `model.` is removed."""
    out = {}
    for key, value in state_dict.items():
        if "_extra_state" in key:
            continue
        out[key[len("model."):] if key.startswith("model.") else key] = value
    return out


def load_cosmos_checkpoint(folder: str | os.PathLike, config: CosmosARConfig | str | None = None, *,
                           condition_frames: int = 1, dtype: torch.dtype | None = None) -> CosmosAR:
    """A `CosmosAR` with the weights of `folder/model.pt` (read with `weights_only=True`).

    Args:
        folder (`str` or `PathLike`): holds `model.pt` and, unless `config` is given,
            `config.json` (the fields of `CosmosARConfig`).
        config (`CosmosARConfig` or `str`, *optional*): the config, or a preset name
            (`"4B"`, `"12B"`), instead of `config.json`.
        condition_frames (`int`, *optional*, defaults to 1): see `CosmosAR`.
        dtype (`torch.dtype`, *optional*): the weights' dtype (float32 by default).

    Example:
        >>> model = load_cosmos_checkpoint("checkpoints/Cosmos-Predict1-4B", "4B")  # doctest: +SKIP
    """
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise ValueError(f"checkpoint folder {folder!r} does not exist")
    weights = os.path.join(folder, "model.pt")
    if not os.path.isfile(weights):
        raise ValueError(f"{folder!r} has no model.pt (the Cosmos-Predict1 AR weights)")
    if isinstance(config, str):
        config = CosmosARConfig.from_name(config)
    state_dict = None
    if config is None:
        path = os.path.join(folder, "config.json")
        if not os.path.isfile(path):
            raise ValueError(f"{folder!r} has no config.json; pass config='4B' or '12B' or a CosmosARConfig")
        try:
            with open(path) as f:
                values = json.load(f)
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{path} is not readable JSON ({first_line(err)})") from None
        known = {f.name for f in fields(CosmosARConfig)}
        if isinstance(values, dict) and not known & set(values):
            # a Hub placeholder ({"architectures": [...]}) names no field: the preset whose
            # width and depth the weights have (every shape is checked when they load)
            state_dict = cosmos_state_dict(read_state_dict(weights))
            config = preset_of(state_dict, path)
        else:
            config = CosmosARConfig.from_dict(values)
    model = CosmosAR.from_checkpoint(weights if state_dict is None else state_dict, config, condition_frames)
    return model if dtype is None else model.to(dtype)


def preset_of(state_dict: dict, source: str) -> CosmosARConfig:
    """The preset (`"4B"`, `"12B"`) with the width and layer count of `state_dict`."""
    embeddings = state_dict.get("tok_embeddings.weight")
    layers = len({k.split(".")[1] for k in state_dict if k.startswith("layers.")})
    dim = None if embeddings is None else embeddings.shape[-1]
    for name, preset in CosmosARConfig.PRESETS.items():
        if (preset["dim"], preset["n_layers"]) == (dim, layers):
            return CosmosARConfig.from_name(name)
    raise ValueError(f"{source} names no config fields and the weights (dim {dim}, {layers} layers) are no preset's; "
                     f"pass config= a CosmosARConfig")
