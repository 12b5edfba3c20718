"""The captions tab: it builds inside the demo's tabs, and its stream marks each token
with the forward that committed it, ending on the decode's own commit record."""

import pytest

gr = pytest.importorskip("gradio", reason="the demo needs the [demo] extra")

from mmspec.apps import caption_tab  # noqa: E402  (after the skip: it imports gradio)
from mmspec.apps.demo import TABS  # noqa: E402
from mmspec.datasets.shape_captions import load_scenes  # noqa: E402
from mmspec.io.images import to_pil  # noqa: E402
from tests.helpers.tiny_captioner import tiny_captioner  # noqa: E402


def test_tab_is_registered_and_builds():
    assert ("Captions", "mmspec.apps.caption_tab", "build_caption_tab") in [tab[:3] for tab in TABS]
    with gr.Blocks() as demo, gr.Tab("Captions"):
        caption_tab.build_caption_tab()
    assert any(getattr(block, "label", None) == "caption (one colour per forward pass)" for block in demo.blocks.values())


@pytest.mark.parametrize("decoding", ["mc-sjd+lookup", "prompt-lookup"])
def test_stream_marks_the_forward_of_every_token(monkeypatch, decoding):
    pipe = tiny_captioner()
    monkeypatch.setattr(caption_tab, "shipped_captioner", lambda *where: pipe)
    image = to_pil(load_scenes("heldout", 1)[0])[0]
    updates = list(caption_tab.caption_stream(image, "describe the picture .", decoding, 12))
    assert len(updates) >= 2
    streamed, _ = updates[-2]
    final, status = updates[-1]
    out = pipe(image, prompt="describe the picture .", decoding=decoding, max_new_tokens=12)
    tokenizer = pipe.processor.tokenizer
    assert "".join(text for text, _ in final).strip() == out.text[0]
    commits = out.stats[0].commit_iteration[0].tolist()
    kept = [k for t, k in zip(out.tokens[0].tolist(), commits) if t not in tokenizer.all_special_ids]
    assert [label for _, label in final] == [f"forward {k + 1}" for k in kept]
    assert streamed == final  # the live stream saw every token, each in the forward that committed it
    assert f"{out.stats[0].forward_passes} forward passes" in status and status.endswith("on cpu in float32")


def test_a_missing_image_is_a_gradio_error():
    with pytest.raises(gr.Error, match="give an image"):
        next(caption_tab.caption_stream(None, "describe the picture .", "ar", 8))
