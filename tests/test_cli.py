"""The `mmspec` command line, on a tiny saved pipeline; `accelerate launch` with two processes."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from PIL import Image

from mmspec.commands.cli import main
from mmspec.pipelines.janus import JanusPipeline
from tests.helpers.pipelines import tiny_c2i_pipeline
from tests.helpers.tiny_models import tiny_janus

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory):
    """A saved tiny c2i pipeline with a 16x16 grid, so that AR takes 256 forwards."""
    root = tmp_path_factory.mktemp("pipe")
    tiny_c2i_pipeline(block_size=256, n_layer=2, class_names=("circle", "square", "stripes")).save_pretrained(root)
    return root


def test_generate_writes_a_labelled_grid_and_times_ar_beside_the_method(pipeline_dir, tmp_path, capsys):
    out = tmp_path / "grid.png"
    assert main(["generate", "--pipeline", str(pipeline_dir), "--classes", "0", "2", "--per-class", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"wrote {out} (2 rows x 2 images; rows: circle, stripes)" in text and "AR needs 256" in text and "auto (exact: samples the model)" in text
    assert "against AR on the same 2 row(s) of 2 image(s), same seeds" in text and "wall-time speed-up over AR" in text
    assert "auto chose: window" in text and "(AR 256 and" in text and "the same tokens as AR in 4 of 4 images" in text
    assert "s, on cpu in float32" in text  # where it ran: auto's device and dtype on a machine without a GPU
    grid = Image.open(out).convert("L")
    images_w = 2 * (2 * (16 + 2) + 2)  # two 16-pixel images per row, 2-pixel padding, scaled 2x
    label = grid.crop((0, 0, grid.width - images_w, grid.height))
    assert label.width > 20 and label.getextrema()[0] < 100  # a column of dark text left of the images
    top, bottom = label.crop((0, 0, label.width, grid.height // 2)), label.crop((0, grid.height // 2, label.width, grid.height))
    assert top.getbbox() != bottom.getbbox() or top.tobytes() != bottom.tobytes()  # one label per row, not one for all


def test_generate_on_a_prompt_pipeline_labels_each_row_with_its_prompt(tmp_path, capsys):
    JanusPipeline(*tiny_janus()).save_pretrained(tmp_path / "janus")
    out = tmp_path / "grid.png"
    assert main(["generate", "--pipeline", str(tmp_path / "janus"), "--prompt", "a cat", "red dog", "--per-class", "2",
                 "--window", "4", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "rows: a cat, red dog" in text and "AR needs 16" in text and "against AR on the same 2 row(s) of 2 image(s)" in text
    grid = Image.open(out).convert("L")
    images_w = 2 * (2 * (8 + 2) + 2)  # two 8-pixel images per row
    assert grid.width > images_w + 20 and grid.crop((0, 0, grid.width - images_w, grid.height)).getextrema()[0] < 100


def forwards_of(verb, out, stdout) -> float:
    if verb == "generate":
        return float(stdout.split("forward passes: ")[1].split(" per image")[0])
    if verb == "bench":
        return json.loads((out / "bench.json").read_text())["rows"][-1]["forwards_per_image"]  # after AR, the baseline
    return json.loads((out / "manifest.jsonl").read_text())["stats"]["forward_passes"]


@pytest.mark.parametrize("verb", ["generate", "bench", "batch"])
@pytest.mark.parametrize("flag,method", [("--window", "sjd"), ("--zipar-window", "zipar+sjd")])
def test_every_verb_honours_the_decoding_flags(pipeline_dir, tmp_path, capsys, verb, flag, method):
    """`batch` and `bench` used to ignore `--window`, `--zipar-window` and `--init`: bench
    with `--window 1` counted the forwards of window 16."""
    labels = tmp_path / "labels.txt"
    labels.write_text("1\n")
    forwards = []
    for value in ("1", "16"):
        out = tmp_path / value
        argv = {"generate": ["--classes", "1", "--per-class", "1", "--out", str(out / "grid.png"), "--decoding", method],
                "bench": ["--classes", "1", "--per-class", "1", "--methods", method, "--out-dir", str(out)],
                "batch": ["--prompts", str(labels), "--out", str(out), "--decoding", method]}[verb]
        assert main([verb, "--pipeline", str(pipeline_dir), flag, value, *argv]) == 0
        forwards.append(forwards_of(verb, out, capsys.readouterr().out))
    assert forwards[0] != forwards[1]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["generate", "--classes", "7"], "--classes '7' is neither a class name (circle, square, stripes) nor a label in [0, 3)"),
        (["generate", "--decoding", "warp"], "unknown decoding 'warp'"),
        (["generate", "--guidance-scale", "-1"], "guidance_scale must be >= 0"),
        (["generate", "--guidance-scale", "inf"], "guidance_scale must be finite and at most 100"),
        (["generate", "--guidance-scale", "nan"], "guidance_scale must be >= 0"),
        (["generate", "--guidance-scale", "1e30"], "guidance_scale must be finite and at most 100"),
        (["bench", "--temperature", "inf"], "temperature must be"),
        (["generate", "--prompt", "a cat"], "class-conditional: use --classes"),
        (["generate", "--window", "100000"], "window 100000 is longer than the 256-token sequence"),
        (["bench", "--window", "300", "--methods", "ar", "sjd"], "window 300 is longer than the 256-token sequence"),
        (["batch", "--window", "257", "--prompts", "labels.txt", "--out", "out"], "window 257 is longer than the 256-token sequence"),
        (["generate", "--decoding", "zipar+sjd", "--zipar-window", "17"], "zipar_window 17 is longer than a 16-token row"),
        (["generate", "--per-class", "1000000"], "--per-class 1000000 is more than the"),
        (["bench", "--per-class", "1000000"], "use `mmspec batch` for large runs"),
        (["generate", "--per-class", "0"], "argument --per-class: must be a whole number >= 1, got '0'"),
        (["generate", "--classes", "1", "1"], "--classes lists a class twice"),
        (["generate", "--threads", "-1"], "argument --threads: must be a whole number from 1 to"),
        (["generate", "--seed", str(2**64)], "argument --seed: must be a whole number from 0 to 9223372036854775807"),
        (["bench", "--seed", "-3"], "argument --seed: must be a whole number from 0"),
        (["batch", "--threads", "0", "--prompts", "labels.txt", "--out", "out"], "argument --threads: must be a whole number"),
        (["batch", "--prompts", "/nonexistent/labels.txt", "--out", "out"], "cannot read prompts file"),
        (["batch", "--prompts", "evil.jsonl", "--out", "out"], "evil.jsonl:1: item id '../../victim/config' is not a plain file name"),
        (["batch", "--prompts", "list.jsonl", "--out", "out"], "list.jsonl:1: expected a JSON object"),
        (["batch", "--prompts", "float.jsonl", "--out", "out"], "float.jsonl:1: class label 1.7 is not an integer"),
    ],
)
def test_user_errors_are_one_line_with_status_2_before_any_work(pipeline_dir, argv, message, capsys, tmp_path, monkeypatch):
    """`--guidance-scale inf` used to draw a flat grid with exit status 0 and "(exact)";
    `--window 100000` ran at seconds per token; `--per-class 1000000` tried to allocate
    terabytes; `--threads -1`, a list line and an evil id gave tracebacks or wrote outside."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "labels.txt").write_text("0\n")
    (tmp_path / "evil.jsonl").write_text('{"id": "../../victim/config", "class_label": 0}\n')
    (tmp_path / "list.jsonl").write_text('[0]\n')
    (tmp_path / "float.jsonl").write_text('{"class_label": 1.7}\n')
    argv = [argv[0], "--pipeline", str(pipeline_dir), *argv[1:]]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert "row 1" not in captured.out and not (tmp_path / "outputs").exists() and not (tmp_path / "out" / "images").exists()


def test_a_pipeline_that_fails_to_load_is_a_one_line_error(tmp_path, capsys):
    """A `model_index.json` holding a JSON list used to end in an AttributeError traceback."""
    (tmp_path / "model_index.json").write_text("[1, 2]")
    assert main(["generate", "--pipeline", str(tmp_path), "--out", str(tmp_path / "grid.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mmspec generate: error: ") and "\n" not in err and "Traceback" not in err


def test_a_multi_line_library_error_is_printed_on_one_line(pipeline_dir, tmp_path, capsys, monkeypatch):
    """transformers' unpickling errors span several lines; the CLI promises one."""
    def refuse(*args, **kwargs):
        raise ValueError("cannot load weights:\n  line two\n  line three")

    monkeypatch.setattr("mmspec.pipelines.load_pipeline", refuse)
    assert main(["generate", "--pipeline", str(pipeline_dir), "--out", str(tmp_path / "grid.png")]) == 2
    assert capsys.readouterr().err == "mmspec generate: error: cannot load weights: line two line three\n"


def test_without_gradio_generate_works_and_demo_says_how_to_install_it(pipeline_dir, tmp_path, capsys, monkeypatch):
    """gradio is the `[demo]` extra: the core install has no gradio."""
    monkeypatch.setitem(sys.modules, "gradio", None)  # what `import gradio` meets when it is not installed
    monkeypatch.delitem(sys.modules, "mmspec.apps.demo", raising=False)
    assert main(["generate", "--pipeline", str(pipeline_dir), "--classes", "0", "--per-class", "1", "--decoding", "ar",
                 "--out", str(tmp_path / "grid.png")]) == 0
    capsys.readouterr()
    assert main(["demo", "--pipeline", str(pipeline_dir)]) == 2
    assert capsys.readouterr().err == "mmspec demo: error: the demo needs gradio, an optional extra: pip install 'mmspec[demo]'\n"


# --- output destinations: checked before the work, one line each -------------------------


def generate_into(pipeline_dir, out, *extra):
    return main(["generate", "--pipeline", str(pipeline_dir), "--classes", "0", "--per-class", "1", "--decoding", "ar",
                 "--out", str(out), *extra])


def test_generate_into_a_folder_is_refused_before_the_work_and_leaves_no_temporary_file(pipeline_dir, tmp_path, capsys):
    """An `--out` that is a folder used to fail after the work, with a traceback and a stray `.tmp`."""
    (tmp_path / "grid.png").mkdir()
    assert generate_into(pipeline_dir, tmp_path / "grid.png") == 2
    captured = capsys.readouterr()
    assert "is a folder; give a file path" in captured.err and "row 1" not in captured.out
    assert os.listdir(tmp_path) == ["grid.png"] and not os.listdir(tmp_path / "grid.png")


def test_an_existing_output_is_replaced_only_with_overwrite(pipeline_dir, tmp_path, capsys):
    out = tmp_path / "grid.png"
    out.write_bytes(b"mine")
    assert generate_into(pipeline_dir, out) == 2
    assert "exists; pass --overwrite to replace it" in capsys.readouterr().err and out.read_bytes() == b"mine"
    assert generate_into(pipeline_dir, out, "--overwrite") == 0
    assert f"replaced {out}" in capsys.readouterr().out and Image.open(out).format == "PNG"


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder this process cannot write in: a chmod 500 one, or for root (who writes
    anywhere chmod allows) sysfs' root, which refuses new files to root too."""
    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o500)
        yield folder
        folder.chmod(0o700)
        return
    try:
        (Path("/sys") / "mmspec-probe").write_text("")
    except OSError:
        yield Path("/sys")
    else:
        pytest.skip("no read-only folder: root can write in /sys here")


def test_a_read_only_output_folder_is_refused_before_the_work(pipeline_dir, read_only_folder, capsys):
    assert generate_into(pipeline_dir, read_only_folder / "grid.png") == 2
    captured = capsys.readouterr()
    assert "is not writable" in captured.err and "row 1" not in captured.out


def test_output_under_a_file_is_refused_before_the_work(pipeline_dir, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert generate_into(pipeline_dir, blocker / "grid.png") == 2
    assert "is not writable" in capsys.readouterr().err
    assert main(["bench", "--pipeline", str(pipeline_dir), "--classes", "0", "--per-class", "1", "--methods", "ar",
                 "--out-dir", str(blocker / "bench")]) == 2
    captured = capsys.readouterr()
    assert "is not writable" in captured.err and "bench" not in captured.out


def test_bench_refuses_to_replace_an_earlier_report_without_overwrite(pipeline_dir, tmp_path, capsys):
    (tmp_path / "bench.md").write_text("mine")
    argv = ["bench", "--pipeline", str(pipeline_dir), "--classes", "0", "--per-class", "1", "--methods", "ar", "--out-dir", str(tmp_path)]
    assert main(argv) == 2
    assert "already holds bench.md; pass --overwrite" in capsys.readouterr().err
    assert main([*argv, "--overwrite"]) == 0 and (tmp_path / "bench.md").read_text() != "mine"
    meta = json.loads((tmp_path / "bench.json").read_text())["meta"]
    assert meta["dtype"] == "float32" and meta["description"].endswith("on cpu in float32")


def test_batch_output_not_writable_is_a_clear_error(pipeline_dir, tmp_path, capsys):
    labels = tmp_path / "labels.txt"
    labels.write_text("0\n1\n")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["batch", "--pipeline", str(pipeline_dir), "--prompts", str(labels), "--out", str(blocker / "out")]) == 2
    assert "is not writable" in capsys.readouterr().err


def test_batch_rerun_with_other_settings_is_refused_and_restart_starts_over(pipeline_dir, tmp_path, capsys):
    """A rerun with `--decoding ar --seed 7` used to add its records to those of mc-sjd and
    report "wrote N items"."""
    labels = tmp_path / "labels.txt"
    labels.write_text("0\n1\n")
    argv = ["batch", "--pipeline", str(pipeline_dir), "--prompts", str(labels), "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    assert main([*argv, "--decoding", "ar", "--seed", "7"]) == 2
    err = capsys.readouterr().err
    assert "holds a run with other decoding and seed settings; choose a new output folder" in err and "--restart" in err
    assert main(argv) == 0  # same settings: resumes (nothing left to do)
    assert main([*argv, "--decoding", "ar", "--seed", "7", "--restart"]) == 0
    records = [json.loads(line) for line in (tmp_path / "out" / "manifest.jsonl").read_text().splitlines()]
    assert [r["decoding"] for r in records] == ["ar", "ar"]


def accelerate_batch(pipeline_dir, labels, out):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    accelerate = Path(sys.executable).with_name("accelerate")
    cmd = [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "mmspec.commands.cli", "batch",
           "--pipeline", str(pipeline_dir), "--prompts", str(labels), "--out", str(out), "--decoding", "ar", "--threads", "1"]
    return subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("accelerate") is None and not Path(sys.executable).with_name("accelerate").exists(),
                    reason="accelerate's launcher is not installed")
def test_accelerate_two_processes_killed_midway_then_resumed(pipeline_dir, tmp_path):
    """Two processes share the items; killing them midway and rerunning finishes the rest
    with every item exactly once in the manifest."""
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"{i % 3}\n" for i in range(24)))
    out = tmp_path / "out"
    first = accelerate_batch(pipeline_dir, labels, out)
    deadline = time.time() + 240
    while time.time() < deadline and len(list((out / "records").glob("*.json"))) < 4 and first.poll() is None:
        time.sleep(0.2)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    done_before = len(list((out / "records").glob("*.json")))
    assert 0 < done_before < 24, first.stdout.read().decode()[-2000:]
    assert not (out / "manifest.jsonl").exists()

    second = accelerate_batch(pipeline_dir, labels, out)
    log = second.communicate(timeout=600)[0].decode()
    assert second.returncode == 0, log[-3000:]
    records = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    ids = [r["id"] for r in records]
    assert ids == [f"{i:06d}" for i in range(1, 25)]
    assert len(list((out / "images").glob("*.png"))) == 24
    assert not list(out.rglob("*.tmp"))
