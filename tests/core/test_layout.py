import pytest
import torch

from mmspec.core.layout import TokenLayout
from tests.helpers.layouts import separator_layout


def test_grid_names_axes_and_gives_row_major_coordinates():
    layout = TokenLayout.grid((2, 3, 4), vocab_size=7)
    assert layout.axes == ("frame", "row", "col") and layout.length == 24 and layout.shape == (2, 3, 4)
    assert layout.coords[13].tolist() == [1, 0, 1]
    assert TokenLayout.grid((5,), 3).axes == ("token",)
    assert TokenLayout.grid((4, 2), 3, axes=("step", "codebook")).axes == ("step", "codebook")


def test_neighbour_follows_each_axis():
    layout = TokenLayout.grid((2, 3, 4), vocab_size=7)
    left, above, before = layout.neighbour("col"), layout.neighbour("row"), layout.neighbour("frame")
    assert left[13].item() == 12 and left[12].item() == -1
    assert above[17].item() == 13 and above[13].item() == -1
    assert before[13].item() == 1 and before[1].item() == -1


def test_separators_are_positions_with_their_own_coordinates():
    layout = separator_layout()
    assert layout.length == 14 and layout.shape == (2, 3, 3)
    starts, ends = layout.runs("row")
    assert starts.tolist() == [0, 3, 6, 7, 10, 13] and ends.tolist() == [3, 6, 7, 10, 13, 14]
    assert layout.runs("frame")[0].tolist() == [0, 7]
    assert layout.neighbour("frame")[8].item() == 1  # frame 1, row 0, col 1 <- frame 0's


def test_truncate_keeps_the_first_positions():
    forced = torch.full((6,), -1)
    forced[5] = 2
    layout = TokenLayout.grid((2, 3), 4, forced=forced).truncate(4)
    assert layout.length == 4 and layout.forced.tolist() == [-1] * 4
    with pytest.raises(ValueError, match="max_length"):
        layout.truncate(0)


def test_allowed_at_covers_k_tokens_per_step():
    forced = torch.tensor([[-1, 1], [-1, -1]])
    layout = TokenLayout.grid((2,), 3, axes=("step",), tokens_per_step=2, forced=forced)
    mask = layout.allowed_at(torch.tensor([0, 1]))
    assert mask.shape == (2, 2, 3)
    assert mask[0, 1].tolist() == [False, True, False] and mask[0, 0].all() and mask[1].all()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(axes=("row", "row"), coords=torch.zeros(2, 2, dtype=torch.long)), "distinct"),
        (dict(axes=("row",), coords=torch.zeros(2, 2, dtype=torch.long)), r"coords must be \[T >= 1, 1\]"),
        (dict(axes=("token",), coords=torch.zeros(2, 1, dtype=torch.long)), "share their coordinates"),
    ],
)
def test_bad_layouts_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TokenLayout(vocab_size=3, **kwargs)


def test_unknown_axis_is_a_clear_error():
    with pytest.raises(ValueError, match="not 'frame'"):
        TokenLayout.grid((2, 2), 3).neighbour("frame")
