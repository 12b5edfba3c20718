import pytest
import torch

gr = pytest.importorskip("gradio", reason="the demo needs the [demo] extra")

from mmspec.apps.lpd_tab import build_lpd_tab, compare_orders  # noqa: E402
from mmspec.assets import DEFAULT_ASSETS  # noqa: E402
from mmspec.models.networks.lpd import LPD, LPDConfig  # noqa: E402
from mmspec.pipelines import load_pipeline  # noqa: E402
from mmspec.pipelines.lpd import LPDPipeline  # noqa: E402


def test_lpd_tab_builds_and_compares_the_raster_methods_with_lpd():
    raster = load_pipeline(DEFAULT_ASSETS)
    torch.manual_seed(0)
    model = LPD(LPDConfig(img_size=64, vqgan_stride=4, decoder_embed_dim=32, decoder_depth=1, decoder_num_heads=2,
                          class_num=10, vqgan_vocab_size=512)).eval()
    lpd = LPDPipeline(model, raster.vqvae, class_names=raster.class_names)
    with gr.Blocks() as demo, gr.Tab("LPD"):
        build_lpd_tab(raster, lpd)
    assert any(isinstance(block, gr.Gallery) for block in demo.blocks.values())
    gallery, heatmaps, rows = compare_orders(raster, lpd, "circle", 20, 0)
    assert [r[1] for r in rows] == ["ar", "mc-sjd", "zipar+mc-sjd", "lpd-20"]
    assert rows[0][2] == 256 and rows[-1][2] == 20 and rows[-1][-1] == 12.8
    assert len(gallery) == len(heatmaps) == 4
    with pytest.raises(ValueError, match="unknown class 'zebra'"):
        compare_orders(raster, lpd, "zebra", 20, 0)
