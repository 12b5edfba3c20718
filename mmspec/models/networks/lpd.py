"""LPD (Zhang et al., 2025, "Locality-aware Parallel Decoding"), checkpoint-compatible with
mit-han-lab/lpd `models/lpd.py`.

A flexible-order class-conditional image generator: a ViT decoder (pre-LayerNorm blocks,
GELU MLP, learnt absolute positions) that predicts a whole *group* of chosen cells per
forward. A step feeds the previous group's real tokens plus one *position query* per cell
of the next group (the learnt `mask_token` plus that cell's position embedding); the
queries of a group see each other and everything decoded, nothing else. The KV cache is
indexed by place in the generation order: slot 0 holds the class, slot i the i-th cell
decoded; a query's slot is the one its cell's real token overwrites a step later.

Attention is block-causal over groups (`group_mask`), in training and in decoding alike:
a real token sees its own group and the groups before; queries see the groups before and
their own queries. Training runs every group of one order in one forward (`forward`):
context `[class, tokens of groups 0..n-2]` then queries for groups 0..n-1.

Same names and shapes as the original (`class_emb`, `token_emb`, `fake_latent` (the CFG
null class), `pos_embed`, `z_proj_ln`, `mask_token`, `blocks.i.{norm1, attn.qkv,
attn.proj, norm2, mlp.fc1, mlp.fc2}`, `norm`, `head`), so released `.pth` checkpoints load
(`LPD.from_checkpoint`, under their `model` key). Dropout is not implemented.

Example:
    >>> import torch
    >>> model = LPD(LPDConfig(img_size=64, vqgan_stride=16, decoder_embed_dim=32, decoder_depth=1,
    ...                       decoder_num_heads=2, class_num=3, vqgan_vocab_size=16))
    >>> orders = torch.stack([torch.randperm(16) for _ in range(2)])
    >>> model(torch.randint(16, (2, 16)), torch.tensor([0, 3]), orders, (1, 3, 5, 7)).shape
    torch.Size([2, 16, 16])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mmspec.utils.checkpoint import DeviceDtypeMixin, JSONConfig, load_into, read_state_dict
from mmspec.core.contracts import GuidedLogits
from mmspec.core.layout import TokenLayout


@dataclass
class LPDConfig(JSONConfig):
    """The original constructor's arguments, same names and defaults (the factories'
    LayerNorm eps of 1e-6). Training-only fields (dropouts) are accepted and unused."""

    config_name = "LPD config"
    size_keys = {"decoder_embed_dim": "width", "decoder_depth": "layers", "decoder_num_heads": "heads",
                 "vqgan_vocab_size": "vocabulary", "class_num": "vocabulary"}

    img_size: int = 256
    vqgan_stride: int = 16
    decoder_embed_dim: int = 1024
    decoder_depth: int = 32
    decoder_num_heads: int = 16
    mlp_ratio: float = 4.0
    label_drop_prob: float = 0.1
    class_num: int = 1000
    attn_dropout: float = 0.1
    proj_dropout: float = 0.1
    vqgan_vocab_size: int = 16384
    norm_eps: float = 1e-6

    PRESETS = {
        "lpd_l": dict(decoder_embed_dim=1024, decoder_depth=24, decoder_num_heads=16),
        "lpd_xl": dict(decoder_embed_dim=1280, decoder_depth=36, decoder_num_heads=20),
        "lpd_xxl": dict(decoder_embed_dim=1536, decoder_depth=48, decoder_num_heads=24),
    }

    def __post_init__(self):
        if self.img_size % self.vqgan_stride:
            raise ValueError(f"img_size {self.img_size} is not a multiple of vqgan_stride {self.vqgan_stride}")
        if self.decoder_embed_dim % self.decoder_num_heads:
            raise ValueError(f"decoder_embed_dim {self.decoder_embed_dim} is not divisible by decoder_num_heads {self.decoder_num_heads}")

    @property
    def grid_size(self) -> int:
        return self.img_size // self.vqgan_stride

    @property
    def seq_len(self) -> int:
        return self.grid_size**2

    def weight_count(self) -> int:
        """Weights of an `LPD` of this config."""
        d, hidden = self.decoder_embed_dim, int(self.decoder_embed_dim * self.mlp_ratio)
        layer = 4 * d * d + 4 * d + 2 * d * hidden + hidden + d + 4 * d
        return self.decoder_depth * layer + (self.class_num + 2 * self.vqgan_vocab_size + self.seq_len + 8) * d

    @classmethod
    def from_name(cls, name: str, **overrides) -> "LPDConfig":
        """A named size of the original (`"lpd_l"`, `"lpd_xl"`, `"lpd_xxl"`), with overrides."""
        if name not in cls.PRESETS:
            raise ValueError(f"unknown LPD config {name!r}; choose from {', '.join(cls.PRESETS)}")
        return cls.from_dict({**cls.PRESETS[name], **overrides})


def group_mask(context_groups: torch.Tensor, query_groups: torch.Tensor) -> torch.Tensor:
    """bool `[n_ctx + n_q, n_ctx + n_q]`, True where a row may attend a column, for context
    entries of group ids `context_groups [n_ctx]` (the class is group 0, the cells of order
    group g are g + 1) followed by queries `query_groups [n_q]` (a query predicting a cell of
    group g has id g + 1): context sees context of its group or earlier; a query sees
    context of earlier groups and the queries of its own group."""
    ctx, q = context_groups, query_groups
    top = torch.cat([ctx[None, :] <= ctx[:, None], torch.zeros(len(ctx), len(q), dtype=torch.bool)], 1)
    bottom = torch.cat([ctx[None, :] < q[:, None], q[None, :] == q[:, None]], 1)
    return torch.cat([top, bottom])


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None,
                slots: slice | None = None) -> torch.Tensor:
        """`mask [n, kv]`: which keys each input sees. With `cache (k, v) [B, H, S, D]`, the
        inputs' keys and values are written at `slots` and the queries read slots up to its end."""
        B, n, C = x.shape
        q, k, v = self.qkv(x).view(B, n, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        if cache is not None:
            cache[0][:, :, slots], cache[1][:, :, slots] = k, v
            k, v = cache[0][:, :, : slots.stop], cache[1][:, :, : slots.stop]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(out.transpose(1, 2).reshape(B, n, C))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, c: LPDConfig):
        super().__init__()
        d = c.decoder_embed_dim
        self.norm1, self.norm2 = nn.LayerNorm(d, eps=c.norm_eps), nn.LayerNorm(d, eps=c.norm_eps)
        self.attn = Attention(d, c.decoder_num_heads)
        self.mlp = Mlp(d, int(d * c.mlp_ratio))

    def forward(self, x, mask, cache=None, slots=None):
        x = x + self.attn(self.norm1(x), mask, cache, slots)
        return x + self.mlp(self.norm2(x))


class LPD(DeviceDtypeMixin, nn.Module):
    """The LPD decoder; `start` opens a cached `LPDSession` for group-by-group decoding
    (`mmspec.core.contracts.GroupModel`: `generate` decodes it with "lpd-<steps>")."""

    decodes_in_groups = True  # `generate` runs LPD's group-by-group decoding on it

    def __init__(self, config: LPDConfig):
        super().__init__()
        self.config = c = config
        d = c.decoder_embed_dim
        self.class_emb = nn.Embedding(c.class_num, d)
        self.token_emb = nn.Embedding(c.vqgan_vocab_size, d)
        self.fake_latent = nn.Parameter(torch.zeros(1, d))
        self.pos_embed = nn.Parameter(torch.zeros(1, c.seq_len + 1, d))
        self.z_proj_ln = nn.LayerNorm(d, eps=1e-6)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, d))
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.decoder_depth))
        self.norm = nn.LayerNorm(d, eps=c.norm_eps)
        self.head = nn.Linear(d, c.vqgan_vocab_size, bias=False)
        self._init_weights()

    def _init_weights(self):
        for p in (self.class_emb.weight, self.token_emb.weight, self.fake_latent, self.pos_embed, self.mask_token):
            nn.init.normal_(p, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    @classmethod
    def from_checkpoint(cls, path_or_state_dict, config: LPDConfig, container_key: str | None = None) -> "LPD":
        """Loads an original LPD checkpoint (`.pth` with the weights under `model`, a bare
        state dict, or `.safetensors`) into a model of `config`."""
        config.check_size()  # before the weights are allocated: 10**9 layers are refused, not built
        model = cls(config)
        load_into(model, read_state_dict(path_or_state_dict, container_key), what="LPD checkpoint")
        return model.eval()

    def layout(self) -> TokenLayout:
        g = self.config.grid_size
        return TokenLayout.grid((g, g), self.config.vqgan_vocab_size)

    def class_embedding(self, labels: torch.Tensor) -> torch.Tensor:
        """`[B, dim]`; label `class_num` (or any label out of range) is the null class."""
        null = (labels < 0) | (labels >= self.config.class_num)
        emb = self.class_emb(labels.clamp(0, self.config.class_num - 1))
        return torch.where(null[:, None], self.fake_latent.to(emb.dtype), emb)

    def embed(self, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Adds the position embeddings of `slots [B, n]` (0 the class, cell c is c + 1)."""
        pos = self.pos_embed[0][slots]
        return self.z_proj_ln(x + pos)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor, orders: torch.Tensor, group_sizes) -> torch.Tensor:
        """Teacher-forced logits `[B, T, V]` for the cells of `orders [B, T]` (raster indices
        in generation order) given `tokens [B, T]` in raster order, decoded in groups of
        `group_sizes` (the same for the batch): entry i predicts the cell `orders[:, i]`."""
        B, T = tokens.shape
        sizes = torch.as_tensor(group_sizes)
        if int(sizes.sum()) != T:
            raise ValueError(f"group sizes sum to {int(sizes.sum())}, not the {T} tokens")
        cell_group = torch.repeat_interleave(torch.arange(1, len(sizes) + 1), sizes)  # [T]
        in_order = tokens.gather(1, orders)
        n_ctx = T - int(sizes[-1])
        cells = orders[:, :n_ctx] + 1
        context = torch.cat([self.class_embedding(labels)[:, None], self.token_emb(in_order[:, :n_ctx])], 1)
        context = self.embed(context, torch.cat([torch.zeros_like(cells[:, :1]), cells], 1))
        queries = self.embed(self.mask_token.expand(B, T, -1), orders + 1)
        mask = group_mask(torch.cat([torch.zeros(1, dtype=torch.long), cell_group[:n_ctx]]), cell_group).to(tokens.device)
        h = torch.cat([context, queries], 1)
        for block in self.blocks:
            h = block(h, mask)
        return self.head(self.norm(h[:, -T:]))

    def start(self, labels: torch.Tensor, orders: torch.Tensor, *, guided: bool) -> "LPDSession":
        """A session decoding the cells of `orders [B, T]` for class `labels [B]`; with
        `guided`, the null-class rows run beside them."""
        return LPDSession(self, labels, orders, guided)


class LPDSession:
    """The KV cache of one LPD call over `orders [B, T]`: `step` feeds the tokens of the
    group asked for last and queries the next group, and returns that group's logits."""

    def __init__(self, model: LPD, labels: torch.Tensor, orders: torch.Tensor, guided: bool):
        c = model.config
        if orders.dim() != 2 or orders.shape[1] != c.seq_len:
            raise ValueError(f"orders must be [batch, {c.seq_len}] cells, got {tuple(orders.shape)}")
        self.model, self.guided = model, guided
        self.orders = orders.to(model.device)
        self.batch_size = len(orders)
        labels = labels.to(model.device)
        if guided:
            labels = torch.cat([labels, torch.full_like(labels, c.class_num)])
        self._class = model.class_embedding(labels)[:, None]
        shape = (len(labels), c.decoder_num_heads, c.seq_len + 1, c.decoder_embed_dim // c.decoder_num_heads)
        self._cache = [tuple(torch.zeros(shape, device=model.device, dtype=model.dtype) for _ in range(2)) for _ in model.blocks]
        self.fed = 0  # cells of the order whose real tokens are in the cache (slot i + 1 holds cell i)
        self.asked = 0  # cells of the order queried so far

    def _rows(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x]) if self.guided else x

    @torch.no_grad()
    def step(self, previous: torch.Tensor | None, group: int) -> GuidedLogits:
        """Feeds `previous [B, m]`, the tokens sampled for the group asked for last (None on
        the first step), and queries the next `group` cells of the order; returns their
        logits `[B, group, V]` (and the null-class rows when guided)."""
        model, T = self.model, self.orders.shape[1]
        m = 0 if previous is None else previous.shape[1]
        if m != self.asked - self.fed:
            raise ValueError(f"feed the {self.asked - self.fed} tokens of the last group asked for, got {m}")
        if group < 1 or self.asked + group > T:
            raise ValueError(f"a group of {group} cells after {self.asked} does not fit the order's {T} cells")
        if previous is None:
            first = self._class
            first_slots = torch.zeros(len(first), 1, dtype=torch.long, device=first.device)
        else:
            first = model.token_emb(self._rows(previous.to(model.device)))
            first_slots = self._rows(self.orders[:, self.fed : self.asked] + 1)
        query_slots = self._rows(self.orders[:, self.asked : self.asked + group] + 1)
        queries = model.mask_token.expand(len(query_slots), group, -1)
        h = torch.cat([model.embed(first, first_slots), model.embed(queries, query_slots)], 1)
        lo = 0 if previous is None else self.fed + 1
        slots = slice(lo, lo + h.shape[1])
        block = torch.cat([torch.zeros(first.shape[1], dtype=torch.long), torch.ones(group, dtype=torch.long)])
        mask = torch.cat([torch.ones(h.shape[1], lo, dtype=torch.bool), block[None, :] <= block[:, None]], 1).to(h.device)
        for layer, cache in zip(model.blocks, self._cache):
            h = layer(h, mask, cache, slots)
        logits = model.head(model.norm(h[:, -group:]))
        self.fed, self.asked = self.asked, self.asked + group
        B = self.batch_size
        return GuidedLogits(logits[:B], logits[B:]) if self.guided else GuidedLogits(logits)

    def __repr__(self) -> str:
        return f"LPDSession(batch_size={self.batch_size}, fed={self.fed}, asked={self.asked}, guided={self.guided})"


def is_lpd_state_dict(state_dict) -> bool:
    """Whether a state dict has LPD's own keys (`mask_token`, `fake_latent`, `z_proj_ln`)."""
    return all(any(k.startswith(name) for k in state_dict) for name in ("mask_token", "fake_latent", "z_proj_ln"))

