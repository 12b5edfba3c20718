"""The shipped models the app's tabs load go where the app's own pipeline runs, in its dtype:
`mmspec demo --device cuda` put the Images tab on the GPU and left every other tab on the CPU."""

import pytest
import torch

gr = pytest.importorskip("gradio", reason="the demo needs the [demo] extra")

from mmspec.apps import audio_tab, demo, lpd_tab, mesh_tab, shipped, video_tab  # noqa: E402
from mmspec.assets import MESH_ASSETS  # noqa: E402
from tests.helpers.pipelines import tiny_c2i_pipeline  # noqa: E402


def test_a_shipped_model_loads_in_the_dtype_on_the_device():
    pipe = shipped.load_shipped(MESH_ASSETS, "cpu", torch.bfloat16)
    assert (pipe.device, pipe.dtype) == (torch.device("cpu"), torch.bfloat16)
    assert next(pipe.classifier.parameters()).dtype == torch.float32  # what the family keeps in float32 stays so


def test_every_tab_loads_its_shipped_model_where_the_given_pipeline_is(monkeypatch):
    loaded = []

    def spy(path, device="cpu", dtype=torch.float32):
        loaded.append((path.name, str(device), dtype))
        return shipped.load_shipped(path, device, dtype)

    for module in (audio_tab, demo, lpd_tab, mesh_tab, video_tab):
        monkeypatch.setattr(module, "load_shipped", spy)
    demo.build_demo(tiny_c2i_pipeline().to(torch.bfloat16))
    assert sorted(name for name, _, _ in loaded) == ["default", "lpd", "mesh", "speech", "video"]
    assert {(device, dtype) for _, device, dtype in loaded} == {("cpu", torch.bfloat16)}
