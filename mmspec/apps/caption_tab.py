"""The demo's captioning tab: the shipped captioner streams a caption, each token marked
with the forward pass that committed it (the same colour for every token one forward
committed), so a reader sees how many tokens each forward of a method accepts.

Registered in `mmspec.apps.demo.TABS`; `build_caption_tab()` lays out its widgets inside
the `gr.Tab` it is called in, around the shipped captioner (loaded on the first request, on
the tab's device and in its dtype) or a given `CaptioningPipeline`.
An upload is refused in one line, from its header alone, when it has more than
`mmspec.core.bounds.MAX_IMAGE_PIXELS` pixels (a 30,000 x 30,000 decompression bomb
included), so that concurrent huge uploads never reach memory.
"""

from __future__ import annotations

import base64
import binascii
import functools
import io
import queue
import threading
import time

import gradio as gr
import numpy as np
import PIL.Image
import torch
from transformers.generation.streamers import BaseStreamer

from mmspec.apps.fields import refusal, seed_field, whole
from mmspec.apps.shipped import load_shipped
from mmspec.assets import CAPTIONER_ASSETS
from mmspec.core.bounds import MAX_IMAGE_PIXELS, check_image_pixels
from mmspec.io.images import to_pil
from mmspec.pipelines.captioning import TEXT_DECODINGS, CaptioningPipeline
from mmspec.runs.batch import MAX_SEED
from mmspec.runs.placement import describe_placement

MAX_NEW_TOKENS = 96
MAX_PROMPT_CHARS = 400
# an upload's pixels: the captioner sees every image resized to its own small input, and
# an RGB image at the cap decodes to 48 MiB (a 12,000 x 12,000 one to 412 MiB)
@functools.cache
def shipped_captioner(device: str = "cpu", dtype: torch.dtype = torch.float32) -> CaptioningPipeline:
    """The shipped captioner on `device` in `dtype`, loaded once for each."""
    return load_shipped(CAPTIONER_ASSETS, device, dtype)


def first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def check_upload_size(payload) -> None:
    """Refuses, from the header alone, an upload of more than `MAX_IMAGE_PIXELS` pixels
    (PIL reads the size without decoding the pixels). `payload` is Gradio's image data: a
    path on the server, or a `data:` URL."""
    if payload is None:
        return
    url = getattr(payload, "url", None) or ""
    try:
        source = io.BytesIO(base64.b64decode(url.partition(",")[2])) if url.startswith("data:") else payload.path
        with PIL.Image.open(source) as im:
            width, height = im.size
    except PIL.Image.DecompressionBombError as err:  # PIL's own cap, far above ours: refused at the header too
        raise refusal(f"the upload is too large an image ({first_line(err)}); this app takes at most "
                      f"{MAX_IMAGE_PIXELS:,} pixels: resize it first") from None
    except (PIL.UnidentifiedImageError, OSError, ValueError, TypeError, binascii.Error) as err:
        raise refusal(f"the upload is not an image this app can read ({first_line(err)}); give a PNG or JPEG file") from None
    try:
        check_image_pixels(width, height, "upload")
    except ValueError as err:
        raise refusal(str(err)) from None


def image_upload(**kwargs) -> gr.Image:
    """A `gr.Image` that refuses an upload which is not an image, or has more than
    `MAX_IMAGE_PIXELS` pixels, in one line before decoding it (Gradio's own message says
    only that the app raised an exception). Its `preprocess` is wrapped on the instance: a
    subclass of a Gradio component would make Gradio write a `.pyi` stub beside this module."""
    image = gr.Image(**kwargs)
    preprocess = image.preprocess

    def readable_preprocess(payload):
        check_upload_size(payload)
        try:
            return preprocess(payload)
        except (PIL.UnidentifiedImageError, OSError, ValueError) as err:
            raise refusal(f"the upload is not an image this app can read ({first_line(err)}); give a PNG or JPEG file") from None

    image.preprocess = readable_preprocess
    return image


class ForwardChunks(BaseStreamer):
    """A streamer that hands over, one list per forward, the token ids that forward
    committed (`put` receives the prompt first, as transformers' `generate` sends it)."""

    def __init__(self):
        self.chunks: queue.Queue = queue.Queue()
        self.seen_prompt = False

    def put(self, value):
        if not self.seen_prompt:
            self.seen_prompt = True
            return
        self.chunks.put(value.flatten().tolist())

    def end(self):
        self.chunks.put(None)

    def __iter__(self):
        while (chunk := self.chunks.get()) is not None:
            yield chunk


def marked_tokens(tokenizer, token_ids, forwards) -> list[tuple[str, str]]:
    """`(text, "forward k")` per token, for a `gr.HighlightedText`; special tokens dropped."""
    special = set(tokenizer.all_special_ids)
    return [(tokenizer.decode([t]), f"forward {k}") for t, k in zip(token_ids, forwards) if t not in special]


def shapes_image(seed):
    """A held-out Shapes image drawn from `seed` (a whole number from 0 to `MAX_SEED`)."""
    from mmspec.datasets.shape_captions import render_scenes
    from mmspec.datasets.shapes import NUM_CLASSES

    rng = np.random.default_rng(whole("seed", seed, 0, MAX_SEED))
    images, _ = render_scenes(rng.integers(NUM_CLASSES, size=1), rng)
    return to_pil(torch.from_numpy(images))[0]


def caption_stream(image, prompt: str, decoding: str, max_new_tokens, pipe: CaptioningPipeline | None = None,
                   device: str = "cpu", dtype: torch.dtype = torch.float32):
    """Yields the caption so far as marked tokens, then the commit marks of the finished
    decode and a line of statistics; `pipe` is the shipped captioner (on `device`, in
    `dtype`) unless given."""
    if image is None:
        raise gr.Error("give an image, or draw a Shapes image")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise gr.Error(f"the prompt is {len(prompt)} characters; at most {MAX_PROMPT_CHARS}")
    pipe = pipe or shipped_captioner(str(device), dtype)
    tokenizer = pipe.processor.tokenizer
    streamer, result = ForwardChunks(), {}

    def run():
        try:
            result["out"] = pipe(image, prompt=prompt.strip() or None, decoding=decoding,
                                 max_new_tokens=int(max_new_tokens), streamer=streamer)
        except ValueError as err:
            result["error"] = str(err)
            streamer.end()

    began = time.perf_counter()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    ids, forwards = [], []
    for k, chunk in enumerate(streamer, start=1):
        ids += chunk
        forwards += [k] * len(chunk)
        yield marked_tokens(tokenizer, ids, forwards), f"decoding ... {k} forward(s), {len(ids)} token(s)"
    worker.join()
    if "error" in result:
        raise gr.Error(result["error"])
    out = result["out"]
    # commit_iteration counts the prefill as forward 0; the stream's first chunk is forward 1
    stats = out.stats[0]
    tokens, commits = out.tokens[0].tolist(), (stats.commit_iteration[0] + 1).tolist()
    n = sum(t not in set(tokenizer.all_special_ids) for t in tokens)
    forwards_used = stats.forward_passes
    yield marked_tokens(tokenizer, tokens, commits), (
        f"{decoding}: {n} tokens in {forwards_used} forward passes ({n / max(forwards_used, 1):.2f} tokens per forward), "
        f"{time.perf_counter() - began:.2f} s, {describe_placement(pipe)}"
    )


def build_caption_tab(pipe: CaptioningPipeline | None = None, device: torch.device | str = "cpu",
                      dtype: torch.dtype = torch.float32) -> None:
    """Lays out the captioning tab inside the `gr.Tab` it is called in, around `pipe` (the
    shipped captioner, on `device` in `dtype`, unless given)."""
    if pipe is not None:
        pipe.set_progress_bar_config(disable=True)
    with gr.Row():
        with gr.Column():
            image = image_upload(type="pil", label="image", height=256)
            with gr.Row():
                seed = seed_field(label="Shapes seed")
                draw = gr.Button("draw a Shapes image")
            prompt = gr.Textbox(value="", label="prompt (empty: the captioner's default, with an example caption)",
                                lines=3, max_length=MAX_PROMPT_CHARS)
            decoding = gr.Dropdown(list(TEXT_DECODINGS), value="auto", label="decoding")
            max_new_tokens = gr.Slider(1, MAX_NEW_TOKENS, value=64, step=1, label="max new tokens")
            run = gr.Button("caption", variant="primary")
        with gr.Column():
            caption_box = gr.HighlightedText(label="caption (one colour per forward pass)", combine_adjacent=False,
                                         show_legend=False)
            status = gr.Markdown(label="status")

    def draw_shapes(seed):
        """A held-out Shapes image drawn from the seed."""
        try:
            return shapes_image(seed)
        except ValueError as err:
            raise refusal(str(err)) from None

    draw.click(draw_shapes, inputs=seed, outputs=image, api_name="draw_shapes")

    def caption(image, prompt, decoding, max_new_tokens):
        """The caption of `image`, streamed: tokens marked with the forward that committed them, and a status line."""
        yield from caption_stream(image, prompt, decoding, max_new_tokens, pipe, device, dtype)

    run.click(caption, inputs=[image, prompt, decoding, max_new_tokens], outputs=[caption_box, status], api_name="caption")
