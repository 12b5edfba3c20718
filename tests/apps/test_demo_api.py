"""The demo's API as `view_api()` advertises it, hostile uploads and settings, and the demo
built around a pipeline of every family. Each test pins a request that once failed with
Gradio's generic "upstream app raised an exception" or a traceback."""

import json
import re
import struct
import zlib
from pathlib import Path

import pytest

gr = pytest.importorskip("gradio", reason="the demo needs the [demo] extra")

from mmspec.apps.demo import build_demo, launch  # noqa: E402
from mmspec.core.bounds import MAX_IMAGE_PIXELS  # noqa: E402
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
    *_, status = client(app).predict(condition="circle", methods=["mc-sjd, window 2.5"], api_name="/generate")
    assert "window must be a whole number" in status


def test_every_output_is_named_and_every_seed_is_a_whole_number(app):
    """Five outputs (the status lines of the Captions, Meshes, Speech, Video and LPD tabs) were
    listed as `value_53`, `value_67`, ...; `/generate` and `/speak` took the seed as a str."""
    api = client(app).view_api(return_format="dict", print_info=False)["named_endpoints"]
    labels = {name: [r["label"] for r in endpoint["returns"]] for name, endpoint in api.items()}
    assert not [(name, label) for name, ls in labels.items() for label in ls if not label or re.fullmatch(r"value_\d+", label)]
    seeds = {name: p["python_type"]["type"] for name, endpoint in api.items() for p in endpoint["parameters"]
             if p["parameter_name"] == "seed"}
    assert set(seeds) == {"/generate", "/draw_shapes", "/generate_mesh", "/speak", "/generate_video", "/generate_lpd"}
    assert set(seeds.values()) == {"int"}


def raw_call(url: str, endpoint: str, body: str) -> dict:
    """An endpoint called over HTTP with a raw JSON body (gradio_client cannot send NaN):
    the last server-sent event, as {"event": ..., "data": ...}."""
    import httpx

    started = httpx.post(f"{url}gradio_api/call{endpoint}", content=body, headers={"content-type": "application/json"})
    started.raise_for_status()
    stream = httpx.get(f"{url}gradio_api/call{endpoint}/{started.json()['event_id']}", timeout=60).text
    events = re.findall(r"event: (\w+)\ndata: (.*)", stream)
    return {"event": events[-1][0], "data": json.loads(events[-1][1])}


@pytest.mark.parametrize("seed", ["null", "NaN", "Infinity", "-Infinity", '"5"', "-1", "2.5"])
def test_draw_shapes_refuses_a_seed_that_is_not_a_whole_number_in_one_line(app, seed):
    """`/draw_shapes` with null, NaN, Infinity or "5" as seed gave "upstream app raised an
    exception" and a traceback in the server's log."""
    answer = raw_call(app, "/draw_shapes", f'{{"data": [{seed}]}}')
    assert answer["event"] == "error"
    assert re.fullmatch(r"seed must be a whole number from 0 to 9223372036854775807, got \S+", answer["data"]["error"])


def test_draw_shapes_draws_from_a_whole_seed(app):
    assert Path(client(app).predict(seed=5, api_name="/draw_shapes")).stat().st_size > 0


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header says `width` x `height` RGB pixels, followed by a few bytes of image
    data: refused from its header, it never reaches memory; decoded, it would be truncated."""
    chunk = lambda kind, data: struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8 bits, RGB, no interlace
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def test_caption_refuses_a_decompression_bomb_in_one_line(app, tmp_path):
    """A 30,000 x 30,000 PNG to `/caption` raised PIL's DecompressionBombError: the page said
    only "upstream app raised an exception"."""
    from gradio_client import handle_file

    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_header(30000, 30000))
    with pytest.raises(Exception, match=r"the upload is too large an image \(Image size \(900000000 pixels\)"):
        client(app).predict(image=handle_file(str(bomb)), prompt="", decoding="ar", max_new_tokens=4, api_name="/caption")


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")  # PIL warns at 89M pixels; the app refuses
def test_caption_refuses_six_concurrent_huge_uploads_from_their_headers(app, tmp_path):
    """Six concurrent 12,000 x 12,000 uploads to `/caption` took the app from 1.2 to 5.3 GB:
    each was decoded in full. Each is now refused from its header; the message names its size
    (decoding these files would fail on their truncated data instead)."""
    from gradio_client import handle_file

    assert 12000 * 12000 > MAX_IMAGE_PIXELS >= 4096 * 4096
    path = tmp_path / "huge.png"
    path.write_bytes(png_header(12000, 12000))
    c = client(app)
    jobs = [c.submit(image=handle_file(str(path)), prompt="", decoding="ar", max_new_tokens=4, api_name="/caption")
            for _ in range(6)]
    for job in jobs:
        with pytest.raises(Exception, match=r"image upload is 12000 x 12000 pixels, more than the 16,777,216"):
            job.result(timeout=60)


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
            params.update(methods=["mc-sjd"])  # one method, to keep it short
        if name == "/caption":
            params.update(image=handle_file(c.predict(seed=0, api_name="/draw_shapes")), max_new_tokens=8)
        out = c.predict(**params, api_name=name)
        status = out[-1] if isinstance(out, (list, tuple)) else out
        assert "Cannot" not in str(status), (name, status)
