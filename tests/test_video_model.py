"""The shipped video model (mmspec/assets/video): what it holds, and greedy decoding with
previous-frame drafts equal to AR on it."""

import torch

from mmspec.assets import VIDEO_ASSETS
from mmspec.decoding.config import DecodingConfig
from mmspec.pipelines import load_pipeline
from mmspec.pipelines.video import VideoPipeline


def test_shipped_video_model_is_small_and_complete():
    size = sum(f.stat().st_size for f in VIDEO_ASSETS.rglob("*") if f.is_file())
    assert size < 15 * 2**20
    pipe = load_pipeline(VIDEO_ASSETS)
    assert isinstance(pipe, VideoPipeline) and pipe.classifier is not None
    assert len(pipe.class_names) >= 8 and pipe.num_frames >= 8 and pipe.frame_grid == (8, 8)


def test_greedy_previous_frame_drafts_equal_ar_on_the_shipped_model():
    pipe = VideoPipeline.from_pretrained(VIDEO_ASSETS)
    pipe.set_progress_bar_config(disable=True)
    kw = dict(class_labels=[3], num_frames=3, temperature=0, output_type="tokens")
    ar = pipe(decoding="ar", **kw)
    fast = pipe(decoding=DecodingConfig("mc-sjd", init="previous-frame"), generator=torch.Generator().manual_seed(0), **kw)
    assert torch.equal(fast.tokens, ar.tokens)
    assert fast.stats[0].forward_passes < ar.stats[0].forward_passes
