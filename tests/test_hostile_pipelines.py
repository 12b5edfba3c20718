"""Hostile inputs to every pipeline family: configs that would allocate past the machine's
memory or carry wrong types, decodings whose branches or windows imply more memory than a
call may take, and the habits every pipeline shares (`.to()`, `.device`, `.dtype`,
`torch_dtype` by name, lists of generators, class names or indices). Each test pins a bug
that once gave a traceback, a hang or a silent repair instead of a one-line error."""

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
import torch

from mmspec.assets import CAPTIONER_ASSETS, DEFAULT_ASSETS, LPD_ASSETS, MESH_ASSETS, SPEECH_ASSETS, VIDEO_ASSETS
from mmspec.pipelines import load_pipeline

SHIPPED = {"default": DEFAULT_ASSETS, "lpd": LPD_ASSETS, "video": VIDEO_ASSETS, "mesh": MESH_ASSETS,
           "speech": SPEECH_ASSETS, "captioner": CAPTIONER_ASSETS}


def linked_copy(src: Path, dst: Path) -> Path:
    """A copy of a saved pipeline whose files are links to the shipped ones (JSON files are
    real copies, to be edited)."""
    def link_or_copy(s, d):
        return shutil.copy2(s, d) if s.endswith(".json") else os.symlink(os.path.abspath(s), d)

    shutil.copytree(src, dst, copy_function=link_or_copy)
    return dst


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def edit_nested(path: Path, key: str, **changes) -> None:
    data = json.loads(path.read_text())
    data[key].update(changes)
    path.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def pipes():
    """Every shipped pipeline, loaded once for the module."""
    return {name: load_pipeline(path) for name, path in SHIPPED.items()}


# --- configs: sizes and types, refused on load --------------------------------------------

# (pipeline, config file inside it, changes): each once made a traceback, a 7.8 GB climb or a hang
HOSTILE_CONFIGS = [
    ("default", "transformer/config.json", {"n_layer": 10**9}),
    ("default", "transformer/config.json", {"dim": 10**7, "n_head": 1}),
    ("default", "transformer/config.json", {"vocab_size": 10**10}),
    ("default", "transformer/config.json", {"n_layer": "6"}),
    ("default", "transformer/config.json", {"n_head": 0}),
    ("default", "vqvae/config.json", {"num_res_blocks": 10**9}),
    ("default", "classifier/config.json", {"widths": [32, 10**7, 128, 128]}),
    ("lpd", "transformer/config.json", {"decoder_depth": 10**9}),
    ("lpd", "transformer/config.json", {"decoder_depth": 2.5}),
    ("video", "transformer/config.json", {"n_layer": 10**9}),
    ("mesh", "model/config.json", {"num_hidden_layers": 10**9}),
    ("mesh", "model/config.json", {"hidden_size": "128"}),
    ("speech", "decoder/config.json", {"num_hidden_layers": 10**9}),
    ("speech", "codec/config.json", {"codebook_size": 10**10}),
    ("speech", "codec/config.json", {"n_mels": "48"}),
    ("speech", "condition/config.json", {"hidden_size": 10**12}),
    ("speech", "condition/config.json", {"hidden_size": "64"}),
]


@pytest.mark.parametrize("name, config, changes", HOSTILE_CONFIGS, ids=[f"{n}-{next(iter(c))}" for n, _, c in HOSTILE_CONFIGS])
def test_hostile_config_is_refused_in_one_line_before_allocating(tmp_path, name, config, changes):
    """A config of 10**9 layers grew to 7.8 GB (the mesh model's hung for minutes), and
    `"n_layer": "6"` gave a TypeError: each is now one ValueError naming the config, fast."""
    root = linked_copy(SHIPPED[name], tmp_path / name)
    path = root / config
    path.unlink() if path.is_symlink() else None
    shutil.copy2(SHIPPED[name] / config, path)
    edit_json(path, **changes)
    started = time.perf_counter()
    with pytest.raises(ValueError) as err:
        load_pipeline(root)
    assert time.perf_counter() - started < 120  # the mesh config of 10**9 layers hung for over 300 s
    message = str(err.value)
    assert "\n" not in message
    assert next(iter(changes)) in message or "memory" in message or "size" in message


@pytest.mark.parametrize("changes", [{"num_hidden_layers": 10**9}, {"vocab_size": 10**12}, {"hidden_size": True}])
def test_nested_text_config_is_checked(tmp_path, changes):
    """A captioner whose nested text_config asks for 10**9 layers, 10**12 ids or a boolean
    width is refused before transformers builds it."""
    root = linked_copy(CAPTIONER_ASSETS, tmp_path / "cap")
    edit_nested(root / "model" / "config.json", "text_config", **changes)
    with pytest.raises(ValueError, match="memory|whole number"):
        load_pipeline(root)


# --- branches and windows: bounded by the sequence and by the memory they imply ------------


def test_image_branches_past_the_vocabulary_are_refused(pipes):
    """`generate --branches 1000000` tried to allocate 73 GB and `--branches 600` ran for
    minutes on a 512-token vocabulary: both are refused before the call decodes."""
    from mmspec.decoding.config import DecodingConfig

    pipe = pipes["default"]
    for branches in (600, 10**6):
        with pytest.raises(ValueError, match="branches"):
            pipe(class_labels=[0], decoding=DecodingConfig.from_name("mc-sjd", branches=branches), output_type="tokens")
        with pytest.raises(ValueError, match="branches"):
            pipe.check_decoding(DecodingConfig.from_name("mc-sjd", branches=branches))


def test_speech_branches_past_the_codebook_are_refused(pipes):
    """`speak --branches 1000000` tried to allocate 393 GB."""
    from mmspec.decoding.config import DecodingConfig

    with pytest.raises(ValueError, match="branches"):
        pipes["speech"]("seven", decoding=DecodingConfig.from_name("mc-sjd", branches=10**6))


def test_speech_window_past_the_clip_is_refused_as_images_refuse_it(pipes):
    """`speak --window 1000000` was silently cut to the clip, while images refuse the same."""
    from mmspec.decoding.config import DecodingConfig

    with pytest.raises(ValueError, match="window 1000000"):
        pipes["speech"].check_decoding(DecodingConfig.from_name("mc-sjd", window=10**6))


def test_mesh_window_and_branches_are_bounded(pipes):
    """The mesh pipeline took any window and any branch count to the engine."""
    from mmspec.decoding.config import DecodingConfig

    mesh = pipes["mesh"]
    with pytest.raises(ValueError, match="window"):
        mesh(class_labels=["box"], decoding="sjd", window=10**6, max_faces=2)
    with pytest.raises(ValueError, match="branches"):
        mesh(class_labels=["box"], decoding=DecodingConfig.from_name("mc-sjd", branches=10**6), max_faces=2)


def test_forward_memory_bound_counts_the_rows_of_a_call(pipes):
    """Branches inside the vocabulary can still ask more of one forward than a call may
    hold when many sequences decode together: refused, naming the memory."""
    from mmspec.core.layout import TokenLayout
    from mmspec.decoding.config import DecodingConfig
    from mmspec.pipelines.checks import check_decoding_memory

    layout = TokenLayout.grid((64, 64), 16384)
    with pytest.raises(ValueError, match="GiB"):
        check_decoding_memory(DecodingConfig.from_name("mc-sjd", branches=4000), layout, 4, device="cpu")
    assert check_decoding_memory(DecodingConfig.from_name("mc-sjd", branches=2), layout, 1, device="cpu").branches == 2


# --- the habits every family shares ---------------------------------------------------------


@pytest.mark.parametrize("name", list(SHIPPED))
def test_torch_dtype_by_name_and_dtype_report_agree(name):
    """`torch_dtype="float16"`, a string as diffusers and transformers take it, was
    refused, and the mesh pipeline loaded as float64 reported float32."""
    pipe = load_pipeline(name, torch_dtype="float64")
    assert pipe.dtype == torch.float64 and pipe.device.type == "cpu"
    with pytest.raises(ValueError, match="torch_dtype"):
        load_pipeline(name, torch_dtype="int8")


def test_speech_pipeline_moves_and_casts_like_every_pipeline(pipes):
    """`.to("cpu")`, `.to(torch.float64)` and `.to(torch.bfloat16)` failed with
    `'WordClassifier' object has no attribute 'dtype'`, and `.device`/`.dtype` were missing."""
    pipe = load_pipeline("speech")
    assert pipe.to("cpu") is pipe and pipe.device.type == "cpu"
    assert pipe.to(torch.bfloat16).dtype == torch.bfloat16
    assert pipe.to(torch.float64).dtype == torch.float64
    out = pipe("seven", decoding="ar", duration_s=0.1, generator=torch.Generator().manual_seed(0))
    assert out.audios.dtype == torch.float32 and torch.isfinite(out.audios).all()


def test_mesh_pipeline_takes_a_list_of_generators(pipes):
    """`MeshPipeline` refused the list of generators the other pipelines take; mesh i
    depends on generator i alone."""
    mesh = pipes["mesh"]
    kwargs = dict(class_labels=["box", "torus"], decoding="ar", max_faces=3)
    both = mesh(**kwargs, generator=[torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)])
    alone = mesh(class_labels=["torus"], decoding="ar", max_faces=3, generator=torch.Generator().manual_seed(2))
    assert len(both.meshes) == 2 and len(both.stats) == 2
    row = both.tokens[1][: alone.tokens.shape[1]]
    assert torch.equal(row, alone.tokens[0])
    with pytest.raises(ValueError, match="one per"):
        mesh(**kwargs, generator=[torch.Generator()])


@pytest.mark.parametrize("name, label", [("default", "square"), ("lpd", "square"), ("video", "circle grow")])
def test_class_pipelines_take_class_names_or_indices(pipes, name, label):
    """Image and video pipelines took only indices while the mesh pipeline takes names."""
    pipe = pipes[name]
    index = pipe.class_names.index(label)
    call = dict(output_type="tokens", generator=torch.Generator().manual_seed(0))
    if name == "video":
        call.update(num_frames=1, decoding="ar")
    elif name == "default":
        call.update(decoding="ar")
    by_name = pipe(class_labels=[label], **call)
    call["generator"] = torch.Generator().manual_seed(0)
    by_index = pipe(class_labels=[index], **call)
    assert torch.equal(by_name.tokens, by_index.tokens)
    with pytest.raises(ValueError, match="unknown class name 'hexagon'"):
        pipe(class_labels=["hexagon"], output_type="tokens")


def test_a_huge_class_label_is_out_of_range_not_an_overflow(pipes):
    """`class_labels=[10**20]` said "Overflow when unpacking long long"."""
    with pytest.raises(ValueError, match=r"class label 100000000000000000000 is out of range \[0, 10\)"):
        pipes["default"](class_labels=[10**20], output_type="tokens")


@pytest.mark.parametrize("steps", [0, -3, 2.5, True])
def test_lpd_refuses_a_step_count_that_is_no_count(pipes, steps):
    """LPD's `num_inference_steps=0` was silently the default."""
    with pytest.raises(ValueError, match="num_inference_steps"):
        pipes["lpd"](class_labels=[0], num_inference_steps=steps, output_type="tokens")


@pytest.mark.parametrize("duration", [float("nan"), float("inf")])
def test_speech_refuses_a_duration_that_is_not_finite(pipes, duration):
    """`speak --duration nan` said "cannot convert float NaN to integer"."""
    with pytest.raises(ValueError, match="finite number of seconds"):
        pipes["speech"].steps_for(duration)


class Pickled:
    """An object only arbitrary unpickling rebuilds."""


def test_a_pickled_checkpoint_refusal_does_not_advise_unsafe_loading(tmp_path):
    """The refusal quoted torch's advice ("This file can still be loaded, to do so you have
    two options", with terminal escape codes), which leads to running the file's code."""
    from mmspec.utils.checkpoint import read_state_dict

    path = tmp_path / "ckpt.pt"
    torch.save({"model": {"w": torch.zeros(1)}, "obj": Pickled()}, path)  # a class weights_only does not allow
    with pytest.raises(ValueError) as err:
        read_state_dict(path)
    message = str(err.value)
    assert "can still be loaded" not in message and "weights_only" not in message and "\x1b" not in message
    assert "refuses to execute" in message


def test_shipped_models_load_by_name_from_any_folder(tmp_path, monkeypatch):
    """After `pip install .` only the default model had a name usable from another folder."""
    from mmspec.pipelines.mesh import MeshPipeline

    monkeypatch.chdir(tmp_path)
    assert type(load_pipeline("video")).__name__ == "VideoPipeline"
    assert MeshPipeline.from_pretrained("mesh").class_names[0] == "box"
    with pytest.raises(ValueError, match="shipped model's name"):
        load_pipeline("nosuch")


def test_captioner_takes_a_list_of_generators(pipes):
    """The captioner took one generator only; caption i now depends on generator i alone."""
    from mmspec.datasets.shape_captions import load_scenes
    from mmspec.io.images import to_pil

    cap = pipes["captioner"]
    images = to_pil(load_scenes("heldout", 2)[0])
    settings = dict(decoding="ar", max_new_tokens=6, do_sample=True)
    both = cap(images, **settings, generator=[torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)])
    alone = cap(images[1], **settings, generator=torch.Generator().manual_seed(2))
    assert len(both.text) == 2 and both.text[1] == alone.text[0]
    assert [s.commit_iteration.shape for s in both.stats] == [(1, 6), (1, 6)]  # one DecodeStats per caption
    with pytest.raises(ValueError, match="one per"):
        cap(images, **settings, generator=[torch.Generator()])


def test_captioner_branches_past_the_vocabulary_are_refused(pipes):
    from mmspec.datasets.shape_captions import load_scenes
    from mmspec.decoding.config import DecodingConfig
    from mmspec.io.images import to_pil

    image = to_pil(load_scenes("heldout", 1)[0])[0]
    with pytest.raises(ValueError, match="branches"):
        pipes["captioner"](image, decoding=DecodingConfig.from_name("mc-sjd", branches=10**6), max_new_tokens=4)


@pytest.mark.parametrize("field, value", [("n_layer", True), ("n_layer", -1), ("n_layer", 6.0), ("dim", "128"),
                                          ("rope_base", float("nan")), ("model_type", 2), ("n_kv_head", "2")])
def test_config_fields_of_the_wrong_type_are_refused(field, value):
    """`"n_layer": "6"` gave a TypeError deep in the constructor; a boolean or a negative
    count was taken as a size."""
    from mmspec.models.networks.llamagen import LlamaGenConfig

    with pytest.raises(ValueError, match=f"field '{field}' must be"):
        LlamaGenConfig.from_dict({"dim": 64, "n_head": 4, "n_layer": 2, field: value})


def test_config_fields_of_the_right_type_load():
    """An int where a float is declared (JSON writes 10000 for 10000.0) and null for an optional field load."""
    from mmspec.models.networks.llamagen import LlamaGenConfig

    config = LlamaGenConfig.from_dict({"dim": 64, "n_head": 4, "n_layer": 2, "rope_base": 10000, "n_kv_head": None})
    assert config.rope_base == 10000 and config.kv_heads == 4


def test_the_docs_do_not_promise_a_decoded_range_the_decoder_overshoots():
    """The README said `vqvae.decode` gives [-1, 1]; the decoder is not clamped and reaches
    1.06. Every documented `decode(...)` range is "about [-1, 1]"."""
    root = Path(__file__).resolve().parents[1]
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for line in path.read_text().splitlines():
            if "decode(" in line and "[-1, 1]" in line:
                assert "about [-1, 1]" in line, f"{path.name}: {line}"


@pytest.mark.parametrize("call, message", [
    (dict(class_labels=["circle", None]), "class_labels must be class names or integers"),
    (dict(class_labels=[0], guidance_scale="3"), "guidance_scale must be a number, got '3'"),
    (dict(class_labels=[0], temperature="1"), "temperature must be a number, got '1'"),
    (dict(class_labels=[0], top_p=None, temperature=True), "temperature must be a number, got True"),
])
def test_python_calls_with_wrong_types_are_value_errors(call, message):
    """These were TypeErrors from a comparison deep inside (`'>=' not supported ...`)."""
    from mmspec.pipelines.llamagen import LlamaGenPipeline

    pipe = LlamaGenPipeline.from_pretrained("default")
    with pytest.raises(ValueError, match=message):
        pipe(**call, decoding="ar", output_type="tokens")


def test_a_string_guidance_scale_in_model_index_json_names_the_file_and_key(tmp_path):
    """A string `guidance_scale` saved in `model_index.json` was a TypeError at the first call."""
    from mmspec.pipelines.llamagen import LlamaGenPipeline

    shutil.copytree(DEFAULT_ASSETS, tmp_path / "pipe")
    index = json.loads((tmp_path / "pipe" / "model_index.json").read_text())
    index["default_sampling"]["guidance_scale"] = "3"
    (tmp_path / "pipe" / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"model_index.json: guidance_scale must be a number, got '3'"):
        LlamaGenPipeline.from_pretrained(tmp_path / "pipe")


@pytest.mark.parametrize("component", ["processor", "model"])
def test_custom_code_named_by_auto_map_is_never_run_nor_offered(tmp_path, monkeypatch, component):
    """A copied captioner with `evil_tok.py` and an `auto_map` naming it made transformers ask
    "run the custom code?" on stdin, and run it on "y"."""
    import io

    from mmspec.assets import CAPTIONER_ASSETS
    from mmspec.pipelines import load_pipeline

    shutil.copytree(CAPTIONER_ASSETS, tmp_path / "pipe")
    folder = tmp_path / "pipe" / component
    marker = tmp_path / "ran"
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    config_file = folder / ("tokenizer_config.json" if component == "processor" else "config.json")
    config = json.loads(config_file.read_text())
    config["auto_map"] = {"AutoTokenizer": ["evil.Evil", None], "AutoProcessor": "evil.Evil", "AutoConfig": "evil.Evil",
                          "AutoModelForImageTextToText": "evil.Evil"}
    config_file.write_text(json.dumps(config))
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n" * 10))
    try:
        load_pipeline(tmp_path / "pipe")
    except ValueError:
        pass  # refusing the folder is as safe as loading it without the code
    assert not marker.exists()


@pytest.mark.parametrize("fps", [-5.5, 0, "8", 1000])
def test_a_saved_frame_rate_that_is_no_rate_is_refused_when_loaded(tmp_path, fps):
    """`"fps": -5.5` in model_index.json was reported as -5 by the writer, after decoding."""
    from mmspec.assets import VIDEO_ASSETS
    from mmspec.pipelines.video import VideoPipeline

    shutil.copytree(VIDEO_ASSETS, tmp_path / "pipe")
    index = json.loads((tmp_path / "pipe" / "model_index.json").read_text())
    (tmp_path / "pipe" / "model_index.json").write_text(json.dumps({**index, "fps": fps}))
    with pytest.raises(ValueError, match=rf"model_index.json: fps must be a whole number from 1 to 120, got {re.escape(repr(fps))}"):
        VideoPipeline.from_pretrained(tmp_path / "pipe")


@pytest.mark.parametrize("names", [["a", "a", "c"], ["a", "", "c"]])
def test_class_names_given_twice_or_empty_are_refused(names):
    """Duplicate class names were accepted: `--classes a` then picked the first of two classes."""
    from tests.helpers.pipelines import tiny_c2i_pipeline

    pipe = tiny_c2i_pipeline()
    with pytest.raises(ValueError, match="class_names"):
        type(pipe)(pipe.transformer, pipe.vqvae, class_names=names)
