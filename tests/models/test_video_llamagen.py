import pytest
import torch

from mmspec.models.networks.video_llamagen import VideoLlamaGen, VideoLlamaGenConfig, rope_3d


def test_rope_turns_each_group_with_its_axis():
    table = rope_3d(frames=2, grid_size=2, head_dim=12, base=10000, prefix_len=1)  # 6 pairs: 2 frame, 2 row, 2 col
    assert table.shape == (1 + 8, 6, 2)
    assert (table[0, :, 0] == 1).all() and (table[0, :, 1] == 0).all()  # the class token: identity, not zero
    angle = torch.atan2(table[1:, :, 1], table[1:, :, 0]).view(2, 2, 2, 6)  # (frame, row, col, pair)
    assert torch.allclose(angle[1, :, :, :2] - angle[0, :, :, :2], angle[1, 0, 0, :2].expand(2, 2, 2))  # frame group
    assert (angle[:, :, :, 2:].sub(angle[:1, :, :, 2:]).abs() < 1e-6).all()  # row and col groups ignore the frame


@pytest.mark.parametrize("fields, message", [
    (dict(frames=3, block_size=16), "block_size 16 is not 3 square frames"),
    (dict(frames=2, block_size=12), "block_size 12 is not 2 square frames"),
    (dict(model_type="t2i"), "class-conditional"),
])
def test_bad_configs_are_one_line_errors(fields, message):
    base = dict(dim=24, n_layer=1, n_head=2, vocab_size=8, frames=2, block_size=8, num_classes=2)
    with pytest.raises(ValueError, match=message):
        VideoLlamaGenConfig(**{**base, **fields})


def test_checkpoint_round_trip(tmp_path):
    from safetensors.torch import save_file

    config = VideoLlamaGenConfig(dim=24, n_layer=1, n_head=2, multiple_of=8, vocab_size=8, frames=2, block_size=8, num_classes=2)
    torch.manual_seed(0)
    model = VideoLlamaGen(config).eval()
    save_file(model.state_dict(), str(tmp_path / "m.safetensors"))
    loaded = VideoLlamaGen.from_checkpoint(tmp_path / "m.safetensors", VideoLlamaGenConfig.from_dict(config.to_dict()))
    x = torch.randint(8, (1, 8))
    assert torch.equal(loaded(x, torch.tensor([1])), model(x, torch.tensor([1])))
