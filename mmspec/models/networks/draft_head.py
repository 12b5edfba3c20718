"""A learned draft head: one transformer block of the target's own kind that predicts the
token after the one just drawn (EAGLE, Li et al. 2024), sampled and verified exactly.

Input j of the head is `[embedding of token j; the target's hidden state that predicted
token j]`, at the target's own rotary position of token j; its output is a feature that
stands for the target's hidden state at token j, read out by the target's own final norm
and output head (frozen, not part of the head's weights) as logits for token j + 1. A
roll-out feeds the head's own feature and the token drawn from it in place of the target's.
With several `layers` the target's outputs of those layers are fused into one feature
first (EAGLE-3); the roll-out then feeds the fused width's stand-in, the head's output.

Under CFG the head runs on the conditional and the unconditional rows, each with its own
hidden states, and its logits are combined like the target's, so it predicts the guided
distribution. Its own KV cache (`DraftHeadSession`) holds the committed positions; roll-out
inputs are never committed.

The head serves the LlamaGen family (LlamaGen, the shipped image and video models): its
block is `mmspec.models.networks.llamagen.TransformerBlock` with the target's sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from mmspec.core.contracts import GuidedLogits, Rejected
from mmspec.models.cache.kv_cache import StaticKVCache
from mmspec.models.networks.llamagen import LlamaGenConfig, TransformerBlock, attention_bias
from mmspec.utils.checkpoint import DeviceDtypeMixin, JSONConfig, load_into, read_state_dict


# the target config's fields that size the head's block and read-out
BLOCK_FIELDS = ("dim", "n_layer", "n_head", "n_kv_head", "multiple_of", "ffn_dim_multiplier", "norm_eps", "initializer_range",
                "vocab_size")


@dataclass
class DraftHeadConfig(JSONConfig):
    """The head's sizes follow its target's (`target`: the `LlamaGenConfig` fields of `BLOCK_FIELDS`);
    `layers`: the target layers whose outputs it reads (one: EAGLE; several: EAGLE-3's fusion);
    `reads_rejected`: the input at the commit front also reads the draft rejected there and
    the target's hidden state on it (`Rejected`)."""

    config_name = "draft head config"

    target: dict = field(default_factory=dict)
    layers: list = field(default_factory=lambda: [-1])
    reads_rejected: bool = True

    def __post_init__(self):
        if not self.layers or not all(isinstance(i, int) for i in self.layers):
            raise ValueError(f"draft head layers must be a non-empty list of layer indices, got {self.layers!r}")

    @property
    def target_config(self) -> LlamaGenConfig:
        return LlamaGenConfig.from_dict(self.target)

    def weight_count(self) -> int:
        c = self.target_config
        block = c.dim * (c.n_head + 2 * c.kv_heads) * c.head_dim + c.dim * c.dim + 3 * c.dim * c.ffn_dim + 2 * c.dim
        fuse = len(self.layers) * c.dim * c.dim if len(self.layers) > 1 else 0
        return block + (4 if self.reads_rejected else 2) * c.dim * c.dim + fuse


class DraftHead(DeviceDtypeMixin, nn.Module):
    """The head's own weights; `bind(target)` lends it the target's embedding, final norm,
    output head and rotary table (a plain reference: they are not saved with the head)."""

    def __init__(self, config: DraftHeadConfig):
        super().__init__()
        self.config = config
        c = config.target_config
        self.fuse = nn.Linear(len(config.layers) * c.dim, c.dim, bias=False) if len(config.layers) > 1 else nn.Identity()
        self.fc = nn.Linear((4 if config.reads_rejected else 2) * c.dim, c.dim, bias=False)
        self.block = TransformerBlock(c)
        self._target = None
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=c.initializer_range)

    @classmethod
    def from_checkpoint(cls, path_or_state_dict, config: DraftHeadConfig) -> "DraftHead":
        """A head from its saved weights (safetensors, or a checkpoint loaded with
        `weights_only=True`); `bind` it to its target before use."""
        head = cls(config)
        load_into(head, read_state_dict(path_or_state_dict), what="draft head")
        return head

    @classmethod
    def for_target(cls, target, layers=(-1,)) -> "DraftHead":
        """A fresh (untrained) head sized for `target`, bound to it."""
        sizes = {name: getattr(target.config, name) for name in BLOCK_FIELDS}
        return cls(DraftHeadConfig(target=sizes, layers=list(layers))).bind(target)

    def bind(self, target) -> "DraftHead":
        ours, theirs = self.config.target_config, target.config
        for name in ("dim", "n_head", "kv_heads", "ffn_dim", "vocab_size"):
            if getattr(ours, name) != getattr(theirs, name):
                raise ValueError(f"this draft head was made for a target with {name}={getattr(ours, name)}, "
                                 f"the model has {getattr(theirs, name)}")
        self.__dict__["_target"] = target  # not a submodule: its weights are not the head's
        return self

    @property
    def target(self):
        if self._target is None:
            raise ValueError("the draft head is not bound to its target model; call head.bind(model)")
        return self._target

    @property
    def layers(self) -> list[int]:
        return list(self.config.layers)

    def fused(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's outputs of `layers` (concatenated) as one feature of the target's width."""
        return self.fuse(hidden)

    def inputs(self, tokens: torch.Tensor, features: torch.Tensor, rejected: "Rejected | None" = None) -> torch.Tensor:
        """The block's inputs `[R, n, dim]` from `tokens [R, n]`, fused `features [R, n, dim]`
        and, for a head that reads them, the rejected drafts (zeros where none: no
        `rejected`, or its token -1)."""
        parts = [self.target.tok_embeddings(tokens), features.to(self.fc.weight.dtype)]
        if self.config.reads_rejected:
            if rejected is None:
                parts.append(parts[1].new_zeros(*parts[1].shape[:-1], 2 * parts[1].shape[-1]))
            else:
                some = (rejected.tokens >= 0)[..., None]
                embedded = self.target.tok_embeddings(rejected.tokens.clamp(min=0))
                parts += [rejected.features.to(parts[1].dtype) * some, embedded * some]
        return self.fc(torch.cat(parts, -1))

    def run(self, tokens, features, rope, mask, cache=None, slots=None, rejected: "Rejected | None" = None) -> torch.Tensor:
        """The head's block on `tokens [R, n]` and fused `features [R, n, dim]`: its output features."""
        return self.block(self.inputs(tokens, features, rejected), rope, mask, cache, 0, slots)

    def read_out(self, features: torch.Tensor) -> torch.Tensor:
        """float logits `[..., V]` of output features, through the target's final norm and head."""
        return self.target.output(self.target.norm(features)).float()

    def forward(self, tokens: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Teacher-forced output features `[R, T, dim]`: input j is token `tokens[:, j]` with
        `features[:, j]` (fused, `[R, T, dim]`: what predicted that token), at its position j."""
        P = self.target.config.cls_token_num
        rope = self.target.rope_table(tokens.device)[None, P:P + tokens.shape[1], None]
        return self.run(tokens, features, rope, None)

    def start(self, batch_size: int, *, guided: bool, length: int, extra_positions: int = 0) -> "DraftHeadSession":
        """A cache for one decoding call over `length` generated positions and
        `extra_positions` scratch ones past them (padding inputs)."""
        c = self.target.config
        rows = batch_size * (2 if guided else 1)
        w = self.fc.weight
        cache = StaticKVCache(1, rows, c.kv_heads, length + extra_positions, c.head_dim, dtype=w.dtype, device=w.device)
        cache.scratch_start = length
        return DraftHeadSession(self, cache, batch_size, guided)


class DraftHeadSession:
    """The head's KV cache for one call; cache slot = generated position."""

    def __init__(self, head: DraftHead, cache: StaticKVCache, batch_size: int, guided: bool):
        self.head, self.cache, self.batch_size, self.guided = head, cache, batch_size, guided
        P = head.target.config.cls_token_num
        self.rope = head.target.rope_table(head.fc.weight.device)[P:]

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x]) if self.guided else x

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, features: torch.Tensor, positions: torch.Tensor, rejected: Rejected | None = None,
                acts_as: torch.Tensor | None = None, visible: torch.Tensor | None = None) -> tuple[torch.Tensor, GuidedLogits]:
        """Runs `tokens [B, n]` with `features [rows, n, dim]` (fused, conditional rows then
        unconditional) at `positions [B, n]`; each input sees the committed positions before
        its own and this call's inputs at or before it. With `acts_as [B, n]` (tree
        attention), input j is written at `positions` but stands for position
        `acts_as[:, j]`: it sees the committed positions before that one and the inputs of
        the call that `visible [B, n, n]` shows it (itself alone by default). Returns the
        output features `[rows, n, dim]` and their logits, each predicting the position after
        its input."""
        slots = self.rows(positions)
        at = slots if acts_as is None else self.rows(acts_as)
        rope = self.rope[at.clamp(max=len(self.rope) - 1), None]
        if acts_as is None:
            visible = self.cache.attention_mask(slots)
        else:
            if visible is None:
                visible = torch.eye(slots.shape[1], dtype=torch.bool, device=slots.device).expand(len(positions), -1, -1)
            visible = self.cache.attention_mask(slots, acts_as=at, visible=self.rows(visible))
        mask = attention_bias(visible, features.dtype)
        out = self.head.run(self.rows(tokens), features, rope, mask, self.cache, slots, rejected)
        logits = self.head.read_out(out)
        B = self.batch_size
        return out, (GuidedLogits(logits[:B], logits[B:]) if self.guided else GuidedLogits(logits))

    def commit(self, positions: torch.Tensor, mask: torch.Tensor) -> None:
        """Marks the slots of `positions [B, n]` where `mask` committed (or a roll-out's, for
        the next roll-out step to see, until `forget`)."""
        self.cache.commit(self.rows(positions), self.rows(mask))

    def forget(self, positions: torch.Tensor) -> None:
        """Un-commits the slots of `positions [B, n]` (a finished roll-out's)."""
        slots = self.rows(positions)
        self.cache.committed[:slots.shape[0]].scatter_(1, slots, False)
