"""Every shipped pipeline's call under the CUDA profile: it returns, the Triton keyed kernel
verifies inside the loop, and keyed and auto give the tokens the CPU profile's AR gives,
for 3 seeds (one call, a generator per item: item i has seed i's tokens).

The calls are short: Triton's interpreter runs a kernel program in about 40 ms on this
CPU, and a whole 256-token image takes some 1,200 of them. The image and video models
decode the first `POSITIONS` positions of their sequence, speech one frame's worth, mesh
two faces and the captioner six tokens; `tests/pipelines/test_shipped_default_equals_ar.py`
checks the whole default calls on the CPU profile, and `benchmarks/gpu_e2e.py` on a GPU."""

import pytest
import torch
from PIL import Image

from mmspec.core.device import forced_profile
from mmspec.pipelines import load_pipeline

SEEDS = (0, 1, 2)
POSITIONS = 12


def call(name, pipe, decoding):
    """The pipeline's call for 3 items, seeds 0, 1, 2: its tokens and per-item stats."""
    generator = [torch.Generator().manual_seed(seed) for seed in SEEDS]
    if name == "default":
        out = pipe(class_labels=[0, 3, 7], decoding=decoding, generator=generator, output_type="tokens")
    elif name == "video":
        out = pipe(class_labels=[0, 1, 2], num_frames=1, decoding=decoding, generator=generator, output_type="tokens")
    elif name == "speech":
        out = pipe(["seven", "one", "four"], duration_s=pipe.max_duration_s / pipe.frames * 3, decoding=decoding,
                   generator=generator, output_type="tokens")
    elif name == "mesh":
        out = pipe(class_labels=[0, 1, 2], decoding=decoding, generator=generator, max_faces=2)
    else:
        out = pipe([Image.new("RGB", (64, 64), (200, 30, 30))] * 3, decoding=decoding, do_sample=True, generator=generator,
                   max_new_tokens=6)
    return out.tokens, out.stats


@pytest.fixture(scope="module")
def pipelines():
    loaded = {}

    def get(name):
        if name not in loaded:
            pipe = loaded[name] = load_pipeline(name)
            pipe.set_progress_bar_config(disable=True)
            if name in ("default", "video"):  # the first positions of the model's sequence
                layout = pipe.transformer.layout
                pipe.transformer.layout = lambda *args, **kwargs: layout(*args, **kwargs).truncate(POSITIONS)
        return loaded[name]

    return get


@pytest.mark.parametrize("name", ["default", "video", "speech", "mesh", "captioner"])
def test_keyed_and_auto_run_the_triton_kernel_and_give_ar_tokens(name, pipelines, kernel_calls):
    pipe = pipelines(name)
    with forced_profile("cpu"):
        ar, _ = call(name, pipe, "ar")
    keyed, stats = call(name, pipe, "keyed")
    assert kernel_calls["verify_keyed_triton"] > 0
    assert all("Triton verification" in s.device for s in stats)
    auto, _ = call(name, pipe, "auto")  # the default
    for row, seed in enumerate(SEEDS):
        assert torch.equal(keyed[row], ar[row]), f"keyed, seed {seed}"
        assert torch.equal(auto[row], ar[row]), f"auto, seed {seed}"


def test_lpd_default_call_returns(pipelines):
    """LPD decodes group by group and verifies nothing: its default call runs under the
    profile with the CPU profile's tokens."""
    pipe = pipelines("lpd")
    out = pipe(class_labels=[1], generator=torch.Generator().manual_seed(0), output_type="tokens")
    with forced_profile("cpu"):
        assert torch.equal(out.tokens, pipe(class_labels=[1], generator=torch.Generator().manual_seed(0),
                                            output_type="tokens").tokens)
