"""Hand-made layouts of the shapes real models have."""

import torch

from mmspec.core.layout import TokenLayout


def separator_layout():
    """Two frames of 2 rows x 2 columns, an end-of-line token after every row (column 2)
    and an end-of-frame token after every frame (its own row 2): positions outside the box."""
    coords = []
    for f in range(2):
        for r in range(2):
            coords += [(f, r, 0), (f, r, 1), (f, r, 2)]
        coords.append((f, 2, 0))
    return TokenLayout(axes=("frame", "row", "col"), coords=torch.tensor(coords), vocab_size=8)


def eol_layout():
    """A 4x4 grid over 16 tokens whose last column is forced to token 15 (an end-of-line),
    allowed nowhere else: the shape of Emu3's layout."""
    T, V = 16, 16
    forced = torch.full((T,), -1)
    forced[3::4] = 15
    allowed = torch.ones(T, V, dtype=torch.bool)
    allowed[:, 15] = False
    allowed[3::4] = False
    allowed[3::4, 15] = True
    return TokenLayout.grid((4, 4), V, allowed=allowed, forced=forced)
