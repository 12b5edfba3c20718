import pytest
import torch

from mmspec.tokenizers.llamagen_vq import LlamaGenVQ, VQConfig


@pytest.fixture(scope="module")
def fixture_vq(llamagen_c2i_fixture):
    f = llamagen_c2i_fixture
    return LlamaGenVQ.from_checkpoint(f["root"] / "vq.pt", VQConfig.from_dict(f["config"]["vq"]))


def test_encode_matches_original_codes(fixture_vq, llamagen_c2i_fixture):
    ref = llamagen_c2i_fixture["reference"]
    assert torch.equal(fixture_vq.encode(ref["image"]), ref["codes"])


def test_decode_matches_original(fixture_vq, llamagen_c2i_fixture):
    ref = llamagen_c2i_fixture["reference"]
    torch.testing.assert_close(fixture_vq.decode(ref["codes"]), ref["decoded"], atol=1e-4, rtol=0)


def test_codebook_is_exposed_l2_normalised(fixture_vq):
    book = fixture_vq.codebook
    assert book.shape == (64, 8)
    torch.testing.assert_close(book.norm(dim=-1), torch.ones(64))


@pytest.mark.parametrize("name,levels,n_tensors", [("VQ-16", 5, 343), ("VQ-8", 4, None)])
def test_named_sizes_have_the_original_layout(name, levels, n_tensors):
    with torch.device("meta"):
        vq = LlamaGenVQ(VQConfig.from_name(name))
    sd = vq.state_dict()
    assert vq.config.downsample == 2 ** (levels - 1)
    assert sd["quantize.embedding.weight"].shape == (16384, 8)
    assert sd["encoder.conv_in.weight"].shape == (128, 3, 3, 3)
    assert sd["post_quant_conv.weight"].shape == (256, 8, 1, 1)
    if n_tensors:  # the original's 344 minus the training-only usage counter
        assert len(sd) == n_tensors


def test_narrow_vq_round_trips_shapes():
    cfg = VQConfig(codebook_size=32, codebook_embed_dim=4, encoder_ch_mult=[1, 2], decoder_ch_mult=[1, 2], z_channels=32, base_channels=32, num_res_blocks=1)
    vq = LlamaGenVQ(cfg).eval()
    codes = vq.encode(torch.rand(2, 3, 16, 16) * 2 - 1)
    assert codes.shape == (2, 64) and codes.max() < 32
    assert vq.decode(codes).shape == (2, 3, 16, 16)


def test_bad_inputs_are_clear_errors(fixture_vq):
    with pytest.raises(ValueError, match="multiples of 2"):
        fixture_vq.encode(torch.zeros(1, 3, 7, 8))
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 64\)"):
        fixture_vq.decode(torch.full((1, 16), 64))
    with pytest.raises(ValueError, match="multiples of 32"):
        VQConfig(base_channels=40)
