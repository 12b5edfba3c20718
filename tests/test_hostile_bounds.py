"""The shared bounds of `mmspec.core.bounds` at every front door that once ran past them:
a text file that never ends, a line nested 100,000 deep, a billion meshes, a video scaled a
million times, more images than a call's working memory holds, a generation longer than the
model's positions, sizes of 0 or 10**9 in a saved config. Each once gave a traceback, a
climb of many GB or a kill by the kernel; each is now one line, before any work."""

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from mmspec.assets import MESH_ASSETS
from mmspec.commands.cli import main
from mmspec.core import bounds
from mmspec.pipelines import load_pipeline
from mmspec.runs.batch import read_items

# --- the bounds themselves -------------------------------------------------------------------


def test_threads_are_bounded_by_the_cores_this_process_may_use():
    import os

    assert 1 <= bounds.machine_cores() <= (os.cpu_count() or 1)


def test_items_within_budget_counts_the_working_copy():
    """The budget once counted the cache alone: 2720 images of the shipped model fit it, and
    their decode (1.55 x the cache, measured) was killed for memory."""
    per_item = 2**20
    assert bounds.items_within_budget(per_item) == bounds.KV_CACHE_BUDGET_BYTES // (bounds.KV_WORKING_FACTOR * per_item)
    assert bounds.items_within_budget(10 * bounds.KV_CACHE_BUDGET_BYTES) == 1


@pytest.mark.parametrize("value", [0, -3, 10**9, "12", 2.0, True, None])
def test_config_sizes_outside_one_to_the_cap_are_refused_naming_file_and_key(value):
    config = {"hidden_size": 64, "text_config": {"num_attention_heads": value}}
    if value is None:  # absent or null: the model's default
        bounds.check_config_sizes(config, "cfg.json")
        return
    with pytest.raises(ValueError, match=r"^cfg\.json: 'num_attention_heads' must be a whole number from 1 to 1,024"):
        bounds.check_config_sizes(config, "cfg.json")


def test_a_text_file_is_read_without_its_byte_order_mark(tmp_path):
    path = tmp_path / "p.txt"
    path.write_bytes("\ufeffa cat\n".encode())
    assert bounds.read_text_file(path, "prompts file") == "a cat\n"


def test_a_huge_regular_text_file_is_refused_by_its_size(tmp_path):
    """Refused from its size alone (a sparse file: nothing is read)."""
    path = tmp_path / "huge.txt"
    with open(path, "wb") as f:
        f.truncate(bounds.MAX_TEXT_FILE_BYTES + 1)
    started = time.perf_counter()
    with pytest.raises(ValueError, match="more than the 67,108,864 one run reads"):
        bounds.read_text_file(path, "prompts file")
    assert time.perf_counter() - started < 1


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_text_file_that_never_ends_is_refused_after_the_cap():
    """`batch --prompts /dev/zero` read 15.7 GB before it was killed."""
    with pytest.raises(ValueError, match="holds more than the 67,108,864 bytes one run reads"):
        read_items("/dev/zero", None)


def test_a_jsonl_line_nested_100000_deep_is_one_line(tmp_path):
    """json.loads raised RecursionError, a traceback at every reader of items."""
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ValueError, match=r"deep\.jsonl:1: not valid JSON \(nested deeper than mmspec reads\)"):
        read_items(path, None)


def test_image_pixels_are_capped_from_the_header():
    bounds.check_image_pixels(4096, 4096, "x.png")
    with pytest.raises(ValueError, match="30000 x 30000 pixels, more than the 16,777,216"):
        bounds.check_image_pixels(30000, 30000, "x.png")


# --- the front doors -----------------------------------------------------------------------


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_generate_text_past_the_model_positions_is_refused_before_allocating(family):
    """`generate_text(..., max_new_tokens=10**9)` on a 64-position model built its layout
    first and was killed at 24 GB."""
    import transformers as tf

    from mmspec.pipelines.text import generate_text

    torch.manual_seed(0)
    if family == "gpt2":
        lm = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=48, n_embd=32, n_layer=2, n_head=4, n_positions=64)).eval()
    else:
        lm = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=48, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                num_attention_heads=2, max_position_embeddings=64)).eval()
    prompt = torch.tensor([[1, 2, 3]])
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"= 1000000003 exceeds the model's 64 positions; ask for at most 61 new tokens"):
        generate_text(lm, prompt, max_new_tokens=10**9)
    assert time.perf_counter() - started < 1
    with pytest.raises(ValueError, match="exceeds the model's 64 positions"):
        generate_text(lm, prompt, max_new_tokens=62)
    assert generate_text(lm, prompt, max_new_tokens=61, eos_token_id=None).shape == (1, 64)


@pytest.fixture(scope="module")
def mesh_pipe():
    return load_pipeline(MESH_ASSETS)


def test_a_billion_meshes_are_refused_at_once(mesh_pipe):
    """`MeshPipeline(num_meshes=10**9)` built a list of a billion labels (52 s, 8.7 GB)
    before it refused."""
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"^1000000000 meshes in one call exceed this model's"):
        mesh_pipe(class_labels=[0], num_meshes=10**9)
    with pytest.raises(ValueError, match=r"^2000000000 meshes in one call exceed"):
        mesh_pipe(class_labels=[0, 1], num_meshes=10**9)
    assert time.perf_counter() - started < 1


def test_save_video_refuses_a_scale_past_the_video_bound(tmp_path):
    """`save_video(scale=10**6)` upscaled the frames in memory: 7 GB before anything failed."""
    from mmspec.io.video import save_video

    frames = np.zeros((4, 8, 8, 3), dtype=np.uint8)
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"^scale must be a whole number from 1 to 512 for 4 frames of 8x8 pixels"):
        save_video(frames, tmp_path / "v.gif", scale=10**6)
    assert time.perf_counter() - started < 1 and not (tmp_path / "v.gif").exists()
    assert save_video(frames, tmp_path / "v.gif", scale=2).exists()


def test_generate_per_class_past_the_working_memory_is_one_line(tmp_path, capsys):
    """`generate --per-class 2720` was within the cache budget and killed for memory: the
    budget now counts the decode's working copy, so it is refused before loading work."""
    pipe = load_pipeline("default")
    assert pipe.max_images_per_call == 1360
    code = main(["generate", "--per-class", "2720", "--classes", "circle", "--out", str(tmp_path / "g.png")])
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert code == 2 and len(errors) == 1, errors
    assert "--per-class 2720 is more than the 1360 images one call" in errors[0]
    assert list(tmp_path.iterdir()) == []


def test_the_forward_check_counts_attention_for_speech():
    """`speak` of 256 words with 64 branches and a window of 51 was killed for memory: the
    forward check counted logits (158 MB) and not the attention over 3160 inputs a row."""
    from mmspec.decoding.config import parse_decoding

    pipe = load_pipeline("speech")
    config = parse_decoding("mc-sjd", window=51, branches=64)
    pipe.check_decoding(config, rows=8)  # 1.9 GB counted, 1.85 GB measured
    with pytest.raises(ValueError, match=r"GiB of logits and attention scores for 256 sequence\(s\), more than the 8 GiB"):
        pipe.check_decoding(config, rows=256)


def mesh_copy(tmp_path: Path, **changes) -> Path:
    root = tmp_path / "mesh"
    shutil.copytree(MESH_ASSETS, root, ignore=shutil.ignore_patterns("*.safetensors"))
    for weights in Path(MESH_ASSETS).rglob("*.safetensors"):
        os.symlink(weights, root / weights.relative_to(MESH_ASSETS))
    path = root / "model" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return root


@pytest.mark.parametrize("key, value", [("num_attention_heads", 0), ("num_attention_heads", -2), ("num_attention_heads", "2"),
                                        ("num_hidden_layers", 10**9), ("ffn_dim", 0)])
def test_a_bad_size_in_a_saved_mesh_config_is_refused_naming_file_and_key(tmp_path, key, value):
    """0 attention heads in the mesh model's config.json was a ZeroDivisionError deep in
    transformers."""
    root = mesh_copy(tmp_path, **{key: value})
    with pytest.raises(ValueError) as err:
        load_pipeline(root)
    message = str(err.value)
    assert "\n" not in message and str(Path("model") / "config.json") in message and repr(key) in message


@pytest.mark.parametrize("changes", [{"n_head": 0}, {"n_layer": "6"}, {"dim": -1}])
def test_a_bad_size_in_a_saved_llamagen_config_names_the_file(tmp_path, changes):
    """The LlamaGen config's refusals named the field but not the file, and 0 heads said
    only that "a size cannot be"."""
    from mmspec.assets import DEFAULT_ASSETS

    root = tmp_path / "default"
    shutil.copytree(DEFAULT_ASSETS, root)
    path = root / "transformer" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    with pytest.raises(ValueError) as err:
        load_pipeline(root)
    message = str(err.value)
    assert "\n" not in message and str(Path("transformer") / "config.json") in message and next(iter(changes)) in message
