"""The demo's API as `view_api()` advertises it, hostile uploads and settings, and the demo
built around a pipeline of every family. Each test pins a request that once failed with
Gradio's generic "upstream app raised an exception" or a traceback."""

from pathlib import Path

import pytest

gr = pytest.importorskip("gradio", reason="the demo needs the [demo] extra")

from mmspec.apps.demo import build_demo, launch  # noqa: E402  (after the skip: it imports gradio)
from mmspec.pipelines import load_pipeline  # noqa: E402
from tests.helpers.demo import client, free_port  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ENDPOINTS = ["/generate", "/draw_shapes", "/caption", "/generate_mesh", "/speak", "/generate_video", "/generate_lpd"]


@pytest.fixture(scope="module")
def app():
    """The demo launched around the shipped captioner (which fills the Captions tab)."""
    port = free_port()
    demo = launch(load_pipeline("captioner"), port=port, block=False)
    yield f"http://127.0.0.1:{port}/"
    demo.close()


def test_the_docs_list_every_endpoint_the_api_has(app):
    """The docs said the API was one endpoint; it has seven."""
    api = client(app).view_api(return_format="dict", print_info=False)
    assert sorted(api["named_endpoints"]) == sorted(ENDPOINTS)
    docs = (REPO / "docs" / "cli-batch-demo.md").read_text()
    import mmspec.apps.demo as demo_module

    for endpoint in ENDPOINTS:
        assert f"`{endpoint}`" in docs and f"`{endpoint}`" in demo_module.__doc__, endpoint


def test_generate_lpd_takes_the_steps_it_advertises(app):
    """`/generate_lpd` advertised `steps: Literal['20', '32']` and refused '20'."""
    c = client(app)
    advertised = c.view_api(return_format="dict", print_info=False)["named_endpoints"]["/generate_lpd"]
    steps = next(p for p in advertised["parameters"] if p["parameter_name"] == "steps")
    assert "'20'" in str(steps["python_type"]["type"])
    *_, status = c.predict(class_name="circle", steps="20", seed=0, api_name="/generate_lpd")
    assert status.startswith("Done"), status


def test_caption_refuses_an_upload_that_is_not_an_image_readably(app, tmp_path):
    """A text file uploaded to `/caption` gave Gradio's generic "upstream app raised an exception"."""
    from gradio_client import handle_file

    fake = tmp_path / "notes.png"
    fake.write_text("not an image at all")
    with pytest.raises(Exception) as err:
        client(app).predict(image=handle_file(str(fake)), prompt="", decoding="ar", max_new_tokens=4, api_name="/caption")
    assert "not an image" in str(err.value)


def test_a_fractional_window_is_refused_not_rounded(app):
    """The page's window field rounded 2.5 to a whole number and ran it."""
    *_, status = client(app).predict(condition="circle", methods=["mc-sjd"], window=2.5, api_name="/generate")
    assert "window must be a whole number" in status


@pytest.mark.parametrize("name, tab", [("mesh", "Meshes"), ("speech", "Speech"), ("lpd", "LPD")])
def test_the_demo_builds_around_a_pipeline_of_another_family(name, tab):
    """`demo --pipeline mmspec/assets/{captioner,mesh,speech}` crashed with AttributeError
    (`default_sampling`, `sequence_length`): the pipeline now fills its own tab."""
    pipe = load_pipeline(name)
    demo = build_demo(pipe)
    titles = [block.label for block in demo.blocks.values() if isinstance(block, gr.Tab)]
    assert "Images" in titles and tab in titles


@pytest.mark.slow
def test_every_endpoint_takes_its_advertised_defaults(app):
    """Each endpoint, called with the defaults `view_api()` advertises (an image drawn by
    `/draw_shapes` for `/caption`; one method for `/generate`, to keep it short), returns a
    result, not Gradio's generic error."""
    from gradio_client import handle_file

    c = client(app)
    api = c.view_api(return_format="dict", print_info=False)["named_endpoints"]
    for name, endpoint in api.items():
        params = {p["parameter_name"]: p["parameter_default"] for p in endpoint["parameters"] if p["parameter_has_default"]}
        if name == "/generate":
            params.update(methods=["mc-sjd"])
        if name == "/caption":
            params.update(image=handle_file(c.predict(seed=0, api_name="/draw_shapes")), max_new_tokens=8)
        out = c.predict(**params, api_name=name)
        status = out[-1] if isinstance(out, (list, tuple)) else out
        assert "Cannot" not in str(status), (name, status)
