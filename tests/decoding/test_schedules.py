import pytest
import torch

from mmspec.core.layout import TokenLayout
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from mmspec.decoding.schedules import Frames, Raster, ZipAR
from tests.helpers.layouts import separator_layout
from tests.decoding.helpers import tiny_model


def test_raster_is_one_segment_open_from_the_start():
    plan = Raster().plan(TokenLayout.grid((3, 4), 5))
    assert plan.starts.tolist() == [0] and plan.ends.tolist() == [12] and plan.parent.tolist() == [-1]


def test_zipar_chains_the_rows_of_every_frame():
    plan = ZipAR(3).plan(TokenLayout.grid((2, 2, 4), 5))
    assert plan.starts.tolist() == [0, 4, 8, 12]
    assert plan.parent.tolist() == [-1, 0, 1, 2] and plan.need.tolist() == [0, 3, 3, 3]


def test_frames_open_after_rows_of_the_previous_frame():
    layout = TokenLayout.grid((3, 3, 4), 5)
    plan = Frames(rows=2).plan(layout)
    assert plan.starts.tolist() == [0, 12, 24] and plan.parent.tolist() == [-1, 0, 1]
    assert plan.need.tolist() == [0, 8, 8]  # two rows of four
    plan = Frames(rows=1, zipar_window=2).plan(layout)
    assert len(plan) == 9
    assert plan.parent.tolist() == [-1, 0, 1, 0, 3, 4, 3, 6, 7]  # a frame's first row waits on the last's first
    assert plan.need.tolist() == [0, 2, 2, 4, 2, 2, 4, 2, 2]


def test_frames_on_separators_count_rows_not_positions():
    plan = Frames(rows=2).plan(separator_layout())
    assert plan.starts.tolist() == [0, 7] and plan.need.tolist() == [0, 6]  # two rows of three (with end-of-line)


def forced_separators():
    """The separator layout with its end-of-line (6) and end-of-frame (7) tokens forced,
    and allowed nowhere else."""
    layout = separator_layout()
    forced = torch.full((layout.length,), -1)
    forced[layout.coords[:, 2] == 2] = 6
    forced[layout.coords[:, 1] == 2] = 7
    allowed = torch.ones(8, dtype=torch.bool)
    allowed[6:] = False
    return TokenLayout(layout.axes, layout.coords, 8, allowed=allowed, forced=forced), forced


@pytest.mark.parametrize("schedule", [ZipAR(1), ZipAR(2), Frames(rows=1), Frames(rows=2, zipar_window=1), Raster()],
                         ids=repr)
@pytest.mark.parametrize("method,init", [("ar", "random")] + [(m, i) for m in ("sjd", "mc-sjd")
                                                                for i in ("random", "left", "previous-frame", "lookup")])
def test_every_schedule_keeps_the_forced_separators(schedule, method, init):
    layout, forced = forced_separators()
    model = tiny_model(vocab_size=8, block_size=16)
    config = DecodingConfig(method=method, window=3, init=init, schedule=schedule)
    tokens, stats = generate(model, torch.tensor([0, 1, 2]), decoding=config, sampling=SamplingConfig(top_k=5),
                             layout=layout, generator=torch.Generator().manual_seed(1))
    free = forced < 0
    assert (tokens[:, ~free] == forced[~free]).all()
    assert (tokens[:, free] < 6).all() and (tokens[:, free] >= 0).all()
    assert stats.exact == isinstance(schedule, Raster)


def test_frame_schedule_decodes_frames_side_by_side():
    """Three frames of 2x4: with frames opening after one row, fewer forwards than raster."""
    model = tiny_model(vocab_size=16, block_size=25)
    layout = TokenLayout.grid((3, 2, 4), 16)
    runs = {}
    for schedule in (Raster(), Frames(rows=1)):
        _, stats = generate(model, torch.tensor([0]), decoding=DecodingConfig(method="ar", schedule=schedule),
                            layout=layout, generator=torch.Generator().manual_seed(0))
        runs[schedule.name] = stats
    assert runs["raster"].forward_passes == 24
    assert runs["frames"].forward_passes < 24 and not runs["frames"].exact
    order = runs["frames"].commit_iteration[0].view(3, 8)
    assert int(order[1, 0]) < int(order[0, -1])  # frame 1 starts before frame 0 ends


@pytest.mark.parametrize("schedule", [ZipAR(2), Frames(rows=1, zipar_window=2)], ids=repr)
@pytest.mark.parametrize("name", ["sjd+lantern", "mc-sjd+gsd"])
def test_schedules_compose_with_relaxed_rules(schedule, name):
    layout, forced = forced_separators()
    layout = TokenLayout(layout.axes, layout.coords, 8, allowed=layout.allowed, forced=forced,
                         token_embeddings=torch.randn(8, 2, generator=torch.Generator().manual_seed(0)))
    config = DecodingConfig.from_name(name, window=3, lantern_k=3, gsd_embed_dist=4.0)
    config = DecodingConfig(method=config.method, rule=config.rule, window=3, init="previous-frame", schedule=schedule)
    tokens, stats = generate(tiny_model(vocab_size=8, block_size=16), torch.tensor([0, 1]), decoding=config,
                             sampling=SamplingConfig(top_k=5), layout=layout, generator=torch.Generator().manual_seed(2))
    assert (tokens[:, forced >= 0] == forced[forced >= 0]).all() and not stats.exact
    assert stats.method == f"{schedule.name}+{name}"
