import torch
from transformers import Emu3VQVAEConfig

from mmspec.tokenizers.emu3_video import Emu3VideoCodec, emu3_video_layout


def tiny_codec() -> Emu3VideoCodec:
    torch.manual_seed(0)
    return Emu3VideoCodec.from_config(Emu3VQVAEConfig(
        codebook_size=32, embed_dim=4, latent_channels=4, base_channels=32, channel_multiplier=[1, 1], num_res_blocks=1,
        attn_resolutions=[], temporal_downsample_factor=2, hidden_size=32, num_attention_heads=1))


def test_emu3_video_vq_encodes_and_decodes_a_clip_with_temporal_downsampling():
    codec = tiny_codec()
    clip = torch.rand(2, 4, 3, 16, 16) * 2 - 1
    codes = codec.encode(clip)
    assert codes.shape == (2, 2, 8, 8) and codes.dtype == torch.long and 0 <= codes.min() and codes.max() < 32
    video = codec.decode(codes)
    assert video.shape == (2, 4, 3, 16, 16) and torch.isfinite(video).all()
    assert torch.equal(codec.encode(clip[:1]), codes[:1])


def test_emu3_video_vq_refuses_a_clip_it_cannot_downsample():
    import pytest

    with pytest.raises(ValueError, match="T a multiple of 2"):
        tiny_codec().encode(torch.zeros(1, 3, 3, 16, 16))


def test_emu3_layout_places_forced_separators_on_the_frame_axes():
    layout = emu3_video_layout(frames=2, rows=2, cols=3, vocab_size=40, eol_token_id=38, eof_token_id=39)
    assert layout.length == 2 * (2 * 4 + 1) and layout.axes == ("frame", "row", "col")
    forced = layout.forced.view(2, 9)
    assert forced[:, [3, 7]].eq(38).all() and forced[:, 8].eq(39).all() and (forced[:, [0, 1, 2, 4, 5, 6]] == -1).all()
    previous = layout.neighbour("frame")
    assert (previous[:9] == -1).all() and torch.equal(previous[9:], torch.arange(9))
    starts, _ = layout.runs("frame")
    assert starts.tolist() == [0, 9]
