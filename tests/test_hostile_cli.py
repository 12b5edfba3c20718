"""Hostile command lines for the generic verbs (`generate`, `bench`, `batch`, `caption`,
`demo`) and the shipped models' names: each case once gave a traceback, or worked only
inside the repository, and now ends in a result or one line on stderr with exit status 2."""

import re
import socket
from pathlib import Path

import pytest
import torch
from PIL import Image

from mmspec.commands.cli import build_parser, main

REPO = Path(__file__).resolve().parents[1]


def run(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def assert_one_line_error(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.startswith("mmspec")]
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A scratch folder outside the repository as the working directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- a pipeline of the wrong family for the verb ------------------------------------------


@pytest.mark.parametrize("family, verb", [("video", "video"), ("speech", "speak"), ("mesh", "mesh"), ("captioner", "caption")])
def test_generate_refuses_another_family_naming_its_verb(capsys, scratch, family, verb):
    """`generate --pipeline mmspec/assets/video` (and speech, mesh, captioner) tracebacked."""
    code, err = run(capsys, "generate", "--pipeline", family, "--out", str(scratch / "g.png"))
    assert_one_line_error(code, err, f"mmspec {verb}")
    assert not (scratch / "g.png").exists()


def test_batch_refuses_a_mesh_pipeline(capsys, scratch):
    (scratch / "items.txt").write_text("0\n")
    code, err = run(capsys, "batch", "--pipeline", "mesh", "--prompts", "items.txt", "--out", "b")
    assert_one_line_error(code, err, "MeshPipeline", "mmspec mesh")


def test_bench_refuses_a_video_pipeline_before_any_decode(capsys, scratch):
    """`bench --pipeline .../video` ran AR first, then tracebacked."""
    code, err = run(capsys, "bench", "--pipeline", "video", "--out-dir", "bench")
    assert_one_line_error(code, err, "VideoPipeline", "mmspec video")


def test_caption_refuses_an_image_generator(capsys, scratch):
    Image.new("RGB", (64, 64)).save(scratch / "a.png")
    code, err = run(capsys, "caption", "a.png", "--pipeline", "default")
    assert_one_line_error(code, err, "LlamaGenPipeline", "mmspec generate")


# --- bounds ---------------------------------------------------------------------------------


@pytest.mark.parametrize("branches", ["600", "1000000"])
def test_generate_refuses_branches_past_the_vocabulary(capsys, scratch, branches):
    """`--branches 1000000` tried to allocate 73 GB; `--branches 600` ran for minutes."""
    code, err = run(capsys, "generate", "--decoding", "mc-sjd", "--branches", branches, "--out", "g.png")
    assert_one_line_error(code, err, "branches")


@pytest.mark.parametrize("port", ["99999", "-1", "0", "http"])
def test_demo_refuses_a_bad_port_at_once(capsys, port):
    """`demo --port 99999` or `--port -1` tracebacked after loading the models."""
    code, err = run(capsys, "demo", "--port", port)
    assert code == 2 and "port" in err and "Traceback" not in err


def test_demo_refuses_a_port_in_use_before_loading(capsys):
    pytest.importorskip("gradio")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        code, err = run(capsys, "demo", "--port", str(port))
    assert_one_line_error(code, err, str(port))


# --- shipped models by name, class names or labels ------------------------------------------


def test_shipped_lpd_model_by_name_from_any_folder(capsys, scratch):
    """`--pipeline mmspec/assets/lpd` worked only in the repository; `--pipeline lpd` works anywhere."""
    code = main(["generate", "--pipeline", "lpd", "--classes", "circle", "--per-class", "1", "--out", "g.png"])
    assert code == 0, capsys.readouterr().err
    assert (scratch / "g.png").is_file()


def test_generate_takes_class_names_and_labels(capsys, scratch):
    """`generate --classes` took only labels while video and mesh take names."""
    code = main(["generate", "--classes", "circle", "1", "--per-class", "1", "--decoding", "ar", "--out", "g.png"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "rows: circle, square" in out.out


def test_generate_refuses_an_unknown_class_name(capsys, scratch):
    code, err = run(capsys, "generate", "--classes", "hexagon", "--out", "g.png")
    assert_one_line_error(code, err, "hexagon", "circle")


def test_an_unknown_pipeline_name_lists_the_shipped_ones(capsys, scratch):
    code, err = run(capsys, "generate", "--pipeline", "nosuchmodel", "--out", "g.png")
    assert_one_line_error(code, err, "nosuchmodel", "lpd", "speech")


@pytest.mark.parametrize("flags, word", [(["--window", "1000000"], "window"), (["--branches", "1000000"], "branches"),
                                         (["--duration", "nan"], "duration")])
def test_speak_refuses_unbounded_or_non_finite_settings(capsys, scratch, flags, word):
    """`speak --window 1000000` was silently cut, `--branches 1000000` tried to allocate
    393 GB and `--duration nan` said "cannot convert float NaN to integer"."""
    code, err = run(capsys, "speak", "seven", "--decoding", "mc-sjd", *flags, "--out", "s.wav")
    assert_one_line_error(code, err, word)
    assert not (scratch / "s.wav").exists()


def test_speak_refuses_another_family_before_loading_it(capsys, scratch):
    code, err = run(capsys, "speak", "seven", "--pipeline", "mesh", "--out", "s.wav")
    assert_one_line_error(code, err, "MeshPipeline", "mmspec mesh")


@pytest.mark.parametrize("verb, model", [("generate", "image"), ("mesh", "mesh"), ("speak", "speech")])
def test_the_help_names_the_pipeline_each_verb_runs_by_default(verb, model):
    """`mesh --help` and `speak --help` said their default pipeline was the shipped image model."""
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[verb]
    pipeline = next(a for a in sub._actions if a.dest == "pipeline")
    assert f"(default: the shipped {model} model)" in pipeline.help
    assert Path(pipeline.default).name == {"image": "default"}.get(model, model)


# --- scripts ----------------------------------------------------------------------------------


def test_the_shared_environment_script_installs_no_clone():
    """`scripts/venv.sh` ran `pip install -e` of each clone into the one shared environment,
    so a second clone re-pointed the first clone's `mmspec` to its own code. It installs the
    dependencies only; the scripts run their own clone through PYTHONPATH."""
    script = (REPO / "scripts" / "venv.sh").read_text()
    installs = [line for line in script.splitlines() if re.search(r"pip\"?\s+install", line) and not line.lstrip().startswith("#")]
    assert installs
    for line in installs:
        assert not re.search(r"\s(-e|--editable)\s|\$repo\[|\s\.(\s|$)|\"\$repo\"(\s|$)", line), line
    for name in ("mmspec", "test.sh"):  # generate.sh runs scripts/mmspec
        assert 'PYTHONPATH="$repo' in (REPO / "scripts" / name).read_text(), name


# --- shared bounds ----------------------------------------------------------------------


@pytest.mark.parametrize("verb", [["generate"], ["caption", "x.png"], ["video"], ["batch", "--prompts", "p.txt", "--out", "o"]])
@pytest.mark.parametrize("threads", ["100000", "0", "-1"])
def test_thread_counts_past_the_machine_s_cores_are_one_line(scratch, capsys, verb, threads):
    """`--threads 100000` started 27,543 threads; `video --threads -1` was a traceback and 0 was ignored."""
    code, err = run(capsys, *verb, "--threads", threads)
    assert_one_line_error(code, err, "--threads", "this machine's cores")


def test_a_labels_file_with_a_byte_order_mark_reads_its_first_label(scratch, capsys):
    """A UTF-8 BOM (Windows editors write one) made the first line's class unknown."""
    from mmspec.runs.batch import read_items

    (scratch / "labels.txt").write_bytes("\ufeffcircle\nsquare\n".encode("utf-8"))
    assert [item.class_label for item in read_items(scratch / "labels.txt", ["circle", "square"])] == [0, 1]


def test_an_init_of_the_wrong_type_is_a_value_error():
    """`DecodingConfig(init=42)` was a TypeError deep in the drafter lookup."""
    from mmspec.decoding.config import DecodingConfig

    with pytest.raises(ValueError, match="init must be a drafter name"):
        DecodingConfig(method="keyed", init=42)


def test_a_method_named_twice_in_bench_is_one_line(scratch, capsys):
    code, err = run(capsys, "bench", "--methods", "ar", "sjd", "ar", "--per-class", "1")
    assert_one_line_error(code, err, "--methods names ar twice")


def test_bench_without_ar_runs_ar_as_the_baseline_and_names_its_files_and_device(scratch, capsys):
    """`bench --methods sjd mc-sjd` labelled ratios against sjd "vs AR", never named
    bench.json, and gave `x86_64` as the device."""
    import json

    from tests.helpers.pipelines import tiny_c2i_pipeline

    tiny_c2i_pipeline().save_pretrained(scratch / "pipe")
    code = main(["bench", "--pipeline", "pipe", "--methods", "keyed", "--classes", "0", "--per-class", "1", "--out-dir", "b"])
    out = capsys.readouterr().out
    assert code == 0 and f"wrote {Path('b') / 'bench.md'}, {Path('b') / 'bench.json'} and {Path('b') / 'bench.png'}" in out
    data = json.loads((scratch / "b" / "bench.json").read_text())
    assert [row["method"] for row in data["rows"]] == ["ar", "keyed"] and data["rows"][0]["fewer_forwards_vs_ar"] == 1
    assert data["meta"]["device"].startswith("CPU: ") and "cores" in data["meta"]["device"]


def test_a_report_without_ar_is_refused_rather_than_mislabelled(tmp_path):
    from mmspec.runs.bench import MethodResult, report

    with pytest.raises(ValueError, match="against AR"):
        report([MethodResult("sjd", True, torch.zeros(1, 3, 4, 4), [10], 1.0)], tmp_path, "t", {})


@pytest.mark.parametrize("seed", ["-1", "x"])
def test_video_refuses_a_negative_seed(scratch, capsys, seed):
    """`video --seed -1` was accepted; every other verb refuses it."""
    code, err = run(capsys, "video", "--seed", seed)
    assert_one_line_error(code, err, "--seed")


@pytest.mark.parametrize("repulsion", [float("nan"), float("inf"), -1.0, "2", True])
def test_an_lpd_repulsion_that_is_no_number_is_refused(repulsion):
    from mmspec.decoding.config import LPDDecoding

    with pytest.raises(ValueError, match="repulsion must be a finite number"):
        LPDDecoding(steps=20, repulsion=repulsion)


def test_a_mesh_constrain_that_is_no_bool_is_refused():
    """`constrain='no'` meant True."""
    from mmspec.pipelines import load_pipeline

    with pytest.raises(ValueError, match="constrain must be True or False, got 'no'"):
        load_pipeline("mesh")(class_labels=["box"], num_meshes=1, constrain="no")


# --- names and disks ----------------------------------------------------------------------


@pytest.mark.parametrize("verb, flag", [("generate", "--out"), ("batch", "--out")])
def test_an_output_name_longer_than_file_systems_take_is_one_line(capsys, scratch, verb, flag):
    """A 300-character `--out` was `OSError: File name too long` from inside `stat`."""
    (scratch / "items.txt").write_text("0\n")
    extra = ["--prompts", "items.txt"] if verb == "batch" else []
    code, err = run(capsys, verb, *extra, flag, "a" * 300 + ".png")
    assert_one_line_error(code, err, "255 bytes")


def test_the_default_pipeline_is_recorded_as_the_shipped_folder_whatever_its_spelling(capsys, scratch):
    """`--pipeline default` was recorded as `<cwd>/default`: the run could not resume from
    another folder or under the folder's path."""
    import json

    from mmspec.assets import DEFAULT_ASSETS

    (scratch / "items.txt").write_text("0\n")
    flags = ["--prompts", "items.txt", "--out", "b", "--decoding", "ar", "--cost", "off"]
    assert main(["batch", "--pipeline", "default", *flags]) == 0
    assert json.loads((scratch / "b" / "run.json").read_text())["settings"]["pipeline"] == str(DEFAULT_ASSETS.resolve())
    capsys.readouterr()
    assert main(["batch", "--pipeline", str(DEFAULT_ASSETS), *flags]) == 0  # the same run: nothing left to do
    assert "wrote 0 items (1 already done)" in capsys.readouterr().out


def test_scripts_mmspec_is_the_command_of_the_examples_from_any_folder(tmp_path):
    """After the README's two commands, `mmspec` was on no PATH though every example starts with it."""
    import os
    import subprocess
    import sys

    done = subprocess.run([str(REPO / "scripts" / "mmspec"), "bench", "--help"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "MMSPEC_VENV": sys.prefix}, timeout=300)
    assert done.returncode == 0 and "bench.json" in done.stdout, done.stderr


def test_a_file_named_like_a_shipped_model_does_not_hide_it(capsys, scratch):
    """A file named `default` in the working directory gave "default is not a directory
    holding a saved pipeline, nor a shipped model's name (default, ...)"."""
    from mmspec.assets import DEFAULT_ASSETS, pipeline_path

    (scratch / "default").write_text("notes\n")
    assert pipeline_path("default") == DEFAULT_ASSETS
    (scratch / "lpd").mkdir()
    assert pipeline_path("lpd") == Path("lpd")  # a folder of that name is what the user pointed at


def test_a_config_that_is_not_utf8_is_refused_naming_the_file(capsys, scratch):
    """A config.json in UTF-16 gave "'utf-8' codec can't decode byte 0xff", naming no file."""
    import shutil

    from mmspec.assets import MESH_ASSETS

    shutil.copytree(MESH_ASSETS, scratch / "mesh_copy")
    (scratch / "mesh_copy" / "model" / "config.json").write_bytes(b"\xff\xfe{\x00}\x00")
    code, err = run(capsys, "mesh", "--pipeline", "mesh_copy", "--out-dir", "m")
    assert_one_line_error(code, err, str(Path("mesh_copy") / "model" / "config.json"), "not UTF-8")


@pytest.mark.parametrize("verb", ["generate", "video"])
def test_a_zipar_window_of_zero_is_refused_even_where_the_method_ignores_it(capsys, scratch, verb):
    """`generate --zipar-window 0` ran the whole default job, the flag silently ignored."""
    code, err = run(capsys, verb, "--zipar-window", "0")
    assert_one_line_error(code, err, "--zipar-window")
