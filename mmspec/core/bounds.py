"""The bounds every front door shares, stated once: threads, what one call may hold in
memory, sizes read from saved configs, and media and text files read from the user.

Each check refuses in one `ValueError` that names the value, the bound and the way out,
before anything is allocated, so that the next verb inherits them instead of repeating
the mistakes (`--threads 100000` started 27,543 threads; `--prompts /dev/zero` read
15.7 GB; a 30,000 x 30,000 PNG was decoded).

Example:
    >>> from mmspec.core.bounds import items_within_budget
    >>> items_within_budget(2**20, what_per_item="image")
    4096
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Mapping
from pathlib import Path

# --- threads --------------------------------------------------------------------------------


def machine_cores() -> int:
    """The cores this process may run on (its affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


# --- what one call may hold --------------------------------------------------------------------

# keys and values one call may hold (CFG rows included): what bounds images, frames, clips
# and meshes per call
KV_CACHE_BUDGET_BYTES = 8 * 2**30
# a decode holds more than its cache: attention reads each layer's keys and values back as
# a working copy, and the allocator keeps slack: counted as 2 x (at the shipped image
# model's limit, a 4 GiB cache, benchmarks/studies/images_per_call_memory.py peaks at 8.3 GiB).
KV_WORKING_FACTOR = 2
# the logits, branch q's and attention scores one forward may hold: what bounds branches
# and windows
FORWARD_BUDGET_BYTES = 8 * 2**30


def items_within_budget(per_item_bytes: int, budget: int = KV_CACHE_BUDGET_BYTES, what_per_item: str = "item") -> int:
    """How many items of `per_item_bytes` cache each fit `budget` once their working copy
    (`KV_WORKING_FACTOR`) is counted; at least 1 (a single item is judged by the forward)."""
    if per_item_bytes <= 0:
        raise ValueError(f"a {what_per_item}'s cache must have a size > 0 bytes, got {per_item_bytes}")
    return max(1, budget // (KV_WORKING_FACTOR * per_item_bytes))


def kv_cache_bytes(layers: int, kv_heads: int, head_dim: int, slots: int, itemsize: int, rows: int = 2) -> int:
    """Keys and values of one item: `rows` sequences (2: cond and uncond under CFG) of
    `slots` positions through `layers` layers."""
    return 2 * rows * layers * kv_heads * head_dim * slots * itemsize


def images_within_budget(layers: int, kv_heads: int, head_dim: int, slots: int, dtype) -> int:
    """Images (frames, clips) whose keys and values (cond and uncond rows, `slots` positions
    each) and their working copy fit `KV_CACHE_BUDGET_BYTES`."""
    return items_within_budget(kv_cache_bytes(layers, kv_heads, head_dim, slots, dtype.itemsize), what_per_item="image")


def check_items_per_call(count: int, limit: int, what: str, why: str) -> None:
    """Refuses `count` items (`what`: "images", "meshes", ...) past `limit`, before any
    list of them is built; `why` says what bounds them."""
    if count > limit:
        raise ValueError(f"{count} {what} in one call exceed this model's {limit} ({why}); split the request")


def forward_bytes(rows: int, inputs: int, tokens_per_step: int, vocab_size: int, keys: int, heads: int) -> int:
    """What one forward over `rows` sequences of `inputs` inputs each holds, float32:

    - logits of the cond and uncond rows and the q's behind branch nodes: `3 x 2 x rows x
      inputs x K x V`;
    - over `keys` keys, per cond and uncond row, the attention mask (bool and additive) and
      the scores of the `heads` heads held at once (SDPA tiles the heads: 1; the eager
      kernel holds them all): `3 x 2 x rows x heads x inputs x keys`.
    """
    logits = 3 * 2 * rows * inputs * tokens_per_step * vocab_size * 4
    scores = 3 * 2 * rows * heads * inputs * keys * 4
    return logits + scores


# --- sizes read from saved configs ------------------------------------------------------------

# far past every published model (405B Llama: 126 layers, 128 heads, a 53,248-wide MLP, a
# 128k context; Emu3: 184,622 ids), short of what only exhausts memory
CONFIG_SIZE_CAPS = {
    "layers": 1024,
    "heads": 1024,
    "width": 2**18,
    "vocabulary": 2**24,
    "positions": 2**24,
    "codebooks": 64,
}
# the transformers config keys of each kind of size (in a nested text_config too)
CONFIG_SIZE_KEYS = {
    "num_hidden_layers": "layers",
    "num_attention_heads": "heads",
    "num_key_value_heads": "heads",
    "hidden_size": "width",
    "intermediate_size": "width",
    "ffn_dim": "width",
    "head_dim": "width",
    "word_embed_proj_dim": "width",
    "vocab_size": "vocabulary",
    "max_position_embeddings": "positions",
    "num_codebooks": "codebooks",
}


def check_config_size(value, key: str, kind: str, where: str) -> int:
    """`value` of `key` in the config file `where` as a whole number from 1 to the cap of
    its `kind` (`CONFIG_SIZE_CAPS`): 0 heads divide by zero, "128" is no width, 10**9
    layers only exhaust memory."""
    cap = CONFIG_SIZE_CAPS[kind]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= cap:
        raise ValueError(f"{where}: {key!r} must be a whole number from 1 to {cap:,} ({kind}), got {value!r}")
    return value


def check_config_sizes(config: Mapping, where: str, keys: Mapping[str, str] = CONFIG_SIZE_KEYS) -> None:
    """Every size of `config` (a config file read as a dict, nested configs included) that
    `keys` names, checked by `check_config_size`; keys absent or null are left to the
    model's defaults."""
    for key, kind in keys.items():
        if config.get(key) is not None:
            check_config_size(config[key], key, kind, where)
    for sub in config.values():
        if isinstance(sub, Mapping):
            check_config_sizes(sub, where, keys)


# --- media and files read from the user -----------------------------------------------------

# pixels of an image read from the user: every model here sees it resized to a few hundred
# pixels a side (PIL's own bomb guard starts at 179M, 0.7 GB of RGB)
MAX_IMAGE_PIXELS = 4096 * 4096
# a video's frames are held in memory at once (RGB, one byte a channel), read or written
MAX_VIDEO_BYTES = 2**30
# wider frames than this are no preview of a small model, and slow every encoder
MAX_FRAME_SIDE = 4096
# an audio file read from the user, and its length
MAX_AUDIO_BYTES = 2**30
MAX_AUDIO_SECONDS = 3600.0
# a prompts, items or labels file: 64 MiB holds a million prompts of 60 characters
MAX_TEXT_FILE_BYTES = 64 * 2**20
# reading is done in chunks of this size, so that a file that never ends stops at the cap
READ_CHUNK_BYTES = 2**20


def read_text_file(path: str | Path, what: str, max_bytes: int = MAX_TEXT_FILE_BYTES) -> str:
    """The UTF-8 text of `path` (a byte-order mark dropped), read in chunks and refused in
    one line past `max_bytes`: a device such as /dev/zero, or a huge file, is never read
    whole. A folder, a missing file or undecodable bytes are refused naming the file."""
    path = Path(path)
    try:
        kind = os.stat(path).st_mode
        if stat.S_ISDIR(kind):
            raise ValueError(f"cannot read {what} {str(path)!r}: it is a folder")
        if stat.S_ISREG(kind) and os.stat(path).st_size > max_bytes:
            raise ValueError(f"{what} {str(path)!r} is {os.stat(path).st_size:,} bytes, more than the {max_bytes:,} "
                             "one run reads; split it")
        chunks, size = [], 0
        with open(path, "rb") as f:
            while chunk := f.read(READ_CHUNK_BYTES):
                size += len(chunk)
                if size > max_bytes:
                    raise ValueError(f"{what} {str(path)!r} holds more than the {max_bytes:,} bytes one run reads "
                                     "(a device or a file that grows?); give a regular file, or split it")
                chunks.append(chunk)
    except OSError as err:
        raise ValueError(f"cannot read {what} {str(path)!r}: {err.strerror}") from None
    try:
        return b"".join(chunks).decode("utf-8-sig")  # a byte-order mark is not part of the first line
    except UnicodeDecodeError as err:
        raise ValueError(f"cannot read {what} {str(path)!r}: it is not UTF-8 text ({err.reason} at byte {err.start})") from None


def json_value(text: str):
    """`json.loads(text)`, with a nesting deeper than the parser can follow (a line of
    100,000 brackets) raised as the `json.JSONDecodeError` of a bad line, not a
    `RecursionError`: callers that refuse invalid JSON refuse it too."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested deeper than mmspec reads", text[:80], 0) from None


def check_image_pixels(width: int, height: int, where: str, max_pixels: int = MAX_IMAGE_PIXELS) -> None:
    """Refuses an image of more than `max_pixels` pixels, from its header (before its
    pixels are decoded)."""
    if width * height > max_pixels:
        side = math.isqrt(max_pixels)
        raise ValueError(f"image {where} is {width} x {height} pixels, more than the {max_pixels:,} ({side} x {side}) "
                         "mmspec reads; resize it first")


def check_media_file(path: str | Path, what: str, max_bytes: int) -> Path:
    """`path` as a regular file of at most `max_bytes` (a WAV or a video from the user),
    checked before it is opened."""
    path = Path(path)
    try:
        info = os.stat(path)
    except OSError as err:
        raise ValueError(f"cannot read {what} {str(path)!r}: {err.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{what} {str(path)!r} is not a regular file")
    if info.st_size > max_bytes:
        raise ValueError(f"{what} {str(path)!r} is {info.st_size:,} bytes, more than the {max_bytes:,} mmspec reads")
    return path


def max_video_scale(frames: int, height: int, width: int) -> int:
    """The largest pixel scale at which `frames` frames of `height` x `width` stay within
    `MAX_FRAME_SIDE` a side and `MAX_VIDEO_BYTES` in all (RGB); at least 1."""
    by_side = MAX_FRAME_SIDE // max(height, width, 1)
    by_bytes = math.isqrt(MAX_VIDEO_BYTES // max(1, frames * height * width * 3))
    return max(1, min(by_side, by_bytes))


def check_video_size(frames: int, height: int, width: int, scale: int = 1) -> None:
    """Refuses a video whose `frames` frames of `height` x `width` pixels, each pixel
    `scale` x `scale` times larger, pass `MAX_FRAME_SIDE` or `MAX_VIDEO_BYTES`."""
    if frames * height * width * 3 > MAX_VIDEO_BYTES or max(height, width) > MAX_FRAME_SIDE:
        raise ValueError(f"{frames} frames of {width}x{height} pixels pass {MAX_FRAME_SIDE} pixels a side or "
                         f"{MAX_VIDEO_BYTES // 2**30} GiB a video; write fewer or smaller frames")
    limit = max_video_scale(frames, height, width)
    if frames * height * width * 3 * scale * scale > MAX_VIDEO_BYTES or max(height, width) * scale > MAX_FRAME_SIDE:
        raise ValueError(f"scale must be a whole number from 1 to {limit} for {frames} frames of {width}x{height} pixels "
                         f"(at most {MAX_FRAME_SIDE} pixels a side and {MAX_VIDEO_BYTES // 2**30} GiB a video), got {scale!r}")
