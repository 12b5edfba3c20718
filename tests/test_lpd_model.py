"""The shipped LPD model (mmspec/assets/lpd): what it holds, and 256 tokens in 20 and 32 forwards."""

import torch

from mmspec.assets import DEFAULT_ASSETS, LPD_ASSETS
from mmspec.pipelines import load_pipeline
from mmspec.pipelines.lpd import LPDPipeline


def test_shipped_lpd_model_is_small_and_complete():
    size = sum(f.stat().st_size for f in LPD_ASSETS.rglob("*") if f.is_file())
    assert size < 15 * 2**20
    pipe = load_pipeline(LPD_ASSETS)
    assert isinstance(pipe, LPDPipeline) and pipe.classifier is not None
    assert pipe.token_grid == (16, 16) and pipe.class_names == load_pipeline(DEFAULT_ASSETS).class_names


def test_the_shipped_lpd_model_makes_256_tokens_in_20_and_32_forwards():
    pipe = load_pipeline(LPD_ASSETS)
    pipe.set_progress_bar_config(disable=True)
    for steps in (20, 32):
        out = pipe([0, 5], decoding=f"lpd-{steps}", generator=torch.Generator().manual_seed(0), output_type="pt")
        assert out.images.shape == (2, 3, 64, 64) and [s.forward_passes for s in out.stats] == [steps, steps]
