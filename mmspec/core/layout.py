"""TokenLayout: where each generated position sits and which tokens it may hold.

A layout is a sequence of `length` positions (steps), each holding `tokens_per_step`
tokens (1, or K codebooks of an audio frame), with coordinates on named axes:
`("row", "col")` for an image, `("frame", "row", "col")` for video, `("step",)` for
codec frames and for text, `("face", "slot")` for a mesh. Coordinates need not
fill a box: separators (Emu3's end-of-line token at column W of every row, an
end-of-frame token after a frame's last row) are positions like any other, usually
forced. Schedules group positions by their coordinates and drafters copy along an axis;
neither looks at a layout's shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

DEFAULT_AXES = {1: ("token",), 2: ("row", "col"), 3: ("frame", "row", "col")}


@dataclass(frozen=True, eq=False)
class TokenLayout:
    """Attributes:
    axes (`tuple[str, ...]`): the name of each coordinate axis.
    coords (`torch.Tensor`): long `[T, len(axes)]`, the coordinates of every position, in
        generation order; no two positions share them.
    vocab_size (`int`): size of the logits' last axis.
    tokens_per_step (`int`, defaults to 1): tokens a position holds (K codebooks).
    allowed (`torch.Tensor`, *optional*): bool `[V]` (same set everywhere) or `[T, V]`
        (per position) of the tokens a position may hold; `None` allows all. With
        `allowed_by`, `[n, V]`: one set per coordinate of that axis.
    allowed_by (`str`, *optional*): the axis whose coordinate picks a position's row of
        `allowed` (the slot of an Orpheus frame: seven sets, however long the clip).
    forced (`torch.Tensor`, *optional*): long `[T]` (or `[T, K]`), the token a position
        must hold (an end-of-line token, say) or -1 where it is free.
    token_embeddings (`torch.Tensor`, *optional*): `[V, E]`, a vector per token (VQ
        codebook entries) for latent-neighbourhood acceptance rules.
    prompt_frames (`int`, defaults to 0): frames of this grid (axes `("frame", ...)`) that
        end the prompt, right before the first position (Cosmos' conditioning frames): a
        copy from the previous frame reads them.
    """

    axes: tuple[str, ...]
    coords: torch.Tensor
    vocab_size: int
    tokens_per_step: int = 1
    allowed: torch.Tensor | None = None
    allowed_by: str | None = None
    forced: torch.Tensor | None = None
    token_embeddings: torch.Tensor | None = None
    prompt_frames: int = 0
    _neighbours: dict = field(default_factory=dict, init=False, repr=False)  # (axis, distance) -> [T]

    def __post_init__(self):
        if len(set(self.axes)) != len(self.axes) or not self.axes:
            raise ValueError(f"layout axes must be distinct names, got {self.axes}")
        if self.coords.dim() != 2 or self.coords.shape[1] != len(self.axes) or self.coords.shape[0] < 1:
            raise ValueError(f"coords must be [T >= 1, {len(self.axes)}] for axes {self.axes}, got {tuple(self.coords.shape)}")
        if len(torch.unique(self.coords, dim=0)) != self.length:
            raise ValueError("two positions of the layout share their coordinates")
        if self.tokens_per_step < 1:
            raise ValueError(f"tokens_per_step must be >= 1, got {self.tokens_per_step}")
        if self.allowed_by is not None:
            extent = self.shape[self.axis(self.allowed_by)]
            if self.allowed is None or self.allowed.dim() != 2 or self.allowed.shape[0] != extent:
                raise ValueError(f"allowed_by={self.allowed_by!r} needs allowed [{extent}, V], one set per coordinate")
        if self.prompt_frames and (self.axes[0] != "frame" or self.prompt_frames < 0):
            raise ValueError(f"prompt_frames needs a layout whose first axis is 'frame', got {self.axes}")
        if self.forced is not None and self.forced.shape not in ((self.length,), (self.length, self.tokens_per_step)):
            raise ValueError(f"forced must be [{self.length}] or [{self.length}, {self.tokens_per_step}], got {tuple(self.forced.shape)}")

    @classmethod
    def grid(cls, shape: tuple[int, ...], vocab_size: int, axes: tuple[str, ...] | None = None, **kwargs) -> "TokenLayout":
        """A full box of positions in row-major order: `TokenLayout.grid((16, 16), 16384)`."""
        axes = axes or DEFAULT_AXES.get(len(shape))
        if axes is None or len(axes) != len(shape):
            raise ValueError(f"name the axes of a {len(shape)}-axis grid, got {axes}")
        ranges = [torch.arange(size) for size in shape]
        coords = torch.stack(torch.meshgrid(*ranges, indexing="ij"), -1).reshape(-1, len(shape))
        return cls(axes=tuple(axes), coords=coords, vocab_size=vocab_size, **kwargs)

    @property
    def length(self) -> int:
        return self.coords.shape[0]

    @property
    def shape(self) -> tuple[int, ...]:
        """Extent of every axis (separators included)."""
        return tuple(int(x) + 1 for x in self.coords.amax(0))

    def axis(self, name: str) -> int:
        if name not in self.axes:
            raise ValueError(f"this layout has axes {self.axes}, not {name!r}")
        return self.axes.index(name)

    def neighbour(self, axis: str, distance: int = 1) -> torch.Tensor:
        """Long `[T]`: the position `distance` steps back along `axis` (same coordinates
        elsewhere), or -1 where there is none: the token to the left, above, in the
        previous frame or the previous step of the same codebook."""
        if (axis, distance) not in self._neighbours:
            self._neighbours[axis, distance] = self._find_neighbour(axis, distance)
        return self._neighbours[axis, distance]

    def prompt_source(self, axis: str, distance: int = 1) -> torch.Tensor:
        """Long `[T]`: where a position's `neighbour` lies before the first position, in the
        prompt's last `prompt_frames` frames, how many tokens before the first position it
        is; 0 elsewhere (only copies along "frame" reach into the prompt)."""
        key = ("prompt", axis, distance)
        if key not in self._neighbours:
            back = torch.zeros(self.length, dtype=torch.long)
            if axis == "frame" and self.prompt_frames:
                frame = math.prod(self.shape[1:])
                before = distance * frame - torch.arange(self.length)
                inside = (self.neighbour(axis, distance) < 0) & (before > 0) & (before <= self.prompt_frames * frame)
                back = torch.where(inside, before, 0)
            self._neighbours[key] = back
        return self._neighbours[key]

    def _find_neighbour(self, axis: str, distance: int) -> torch.Tensor:
        a = self.axis(axis)
        strides = torch.tensor(self.shape[1:] + (1,)).flip(0).cumprod(0).flip(0)
        key = lambda c: (c * strides).sum(-1)
        lookup = torch.full((int(key(torch.tensor(self.shape)) + 1),), -1, dtype=torch.long)
        lookup[key(self.coords)] = torch.arange(self.length)
        source = self.coords.clone()
        source[:, a] -= distance
        found = (source >= 0).all(-1)
        return torch.where(found, lookup[key(source.clamp(min=0))], -1)

    def runs(self, axis: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Start and end positions `[R]` of the maximal runs of consecutive positions that
        agree on every axis up to `axis`: the rows of an image for "row", its frames for
        "frame" (separators go with the run they sit in)."""
        key = self.coords[:, : self.axis(axis) + 1]
        new = torch.ones(self.length, dtype=torch.bool)
        new[1:] = (key[1:] != key[:-1]).any(-1)
        starts = new.nonzero()[:, 0]
        return starts, torch.cat([starts[1:], torch.tensor([self.length])])

    def truncate(self, length: int) -> "TokenLayout":
        """The first `length` positions of this layout (a maximum length per call)."""
        if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length:
            raise ValueError(f"max_length must be an integer >= 1, got {length!r}")
        if length >= self.length:
            return self
        per_position = lambda t: t if t is None else t[:length]
        coords, allowed = self.coords[:length], self.allowed
        if self.allowed_by is not None:  # the coordinates left on that axis
            allowed = allowed[: int(coords[:, self.axis(self.allowed_by)].max()) + 1]
        elif allowed is not None and allowed.dim() == 2:
            allowed = allowed[:length]
        return replace(self, coords=coords, allowed=allowed, forced=per_position(self.forced))

    def allowed_at(self, positions: torch.Tensor) -> torch.Tensor | None:
        """Bool `[..., V]` (`[..., K, V]` when a step holds K tokens) allowed-token mask for
        long `positions [...]` (past the end: the last position's), or None when all are
        allowed. A forced position allows only its forced token, so sampling and drafting
        need no special case for it."""
        if self.allowed is None and self.forced is None:
            return None
        positions = positions.clamp(max=self.length - 1)
        V = self.vocab_size
        if self.allowed is None:
            mask = torch.ones(*positions.shape, V, dtype=torch.bool, device=positions.device)
        elif self.allowed.dim() == 1:
            mask = self.allowed.to(positions.device).expand(*positions.shape, V)
        else:
            rows = positions if self.allowed_by is None else self.coords[:, self.axis(self.allowed_by)].to(positions.device)[positions]
            mask = self.allowed.to(positions.device)[rows]
        K = self.tokens_per_step
        if K > 1:
            mask = mask[..., None, :].expand(*positions.shape, K, V)
        if self.forced is not None:
            forced = self.forced.to(positions.device)[positions]
            if K > 1 and forced.dim() == positions.dim():
                forced = forced[..., None].expand(*positions.shape, K)
            one_hot = torch.nn.functional.one_hot(forced.clamp(min=0), V).bool()
            mask = torch.where((forced >= 0)[..., None], one_hot, mask)
        return mask
