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

from mmspec.cli import main
from tests.pipelines.test_llamagen_pipeline import tiny_c2i_pipeline

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory):
    """A saved tiny c2i pipeline with a 16x16 grid, so that AR takes 256 forwards."""
    root = tmp_path_factory.mktemp("pipe")
    tiny_c2i_pipeline(block_size=256, n_layer=2, class_names=("circle", "square", "stripes")).save_pretrained(root)
    return root


def test_generate_writes_a_grid(pipeline_dir, tmp_path, capsys):
    out = tmp_path / "grid.png"
    assert main(["generate", "--pipeline", str(pipeline_dir), "--classes", "0", "2", "--per-class", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert out.is_file() and "rows: circle, stripes" in text and "AR needs 256" in text


def test_bench_writes_a_table_and_a_plot(pipeline_dir, tmp_path, capsys):
    assert main(["bench", "--pipeline", str(pipeline_dir), "--classes", "1", "--per-class", "1",
                 "--methods", "ar", "mc-sjd", "--out-dir", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert [r["method"] for r in rows] == ["ar", "mc-sjd"] and rows[0]["forwards_per_image"] == 256
    assert (tmp_path / "bench.png").is_file()


@pytest.mark.parametrize(
    "argv,message",
    [
        (["generate", "--classes", "7"], "--classes must be one or more labels in [0, 3)"),
        (["generate", "--decoding", "warp"], "unknown decoding 'warp'"),
        (["generate", "--guidance-scale", "-1"], "guidance_scale must be >= 0"),
        (["generate", "--prompt", "a cat"], "class-conditional: use --classes"),
        (["batch", "--prompts", "/nonexistent/labels.txt", "--out", "x"], "cannot read prompts file"),
    ],
)
def test_user_errors_are_one_line_with_status_2(pipeline_dir, argv, message, capsys, tmp_path):
    argv = [argv[0], "--pipeline", str(pipeline_dir), *argv[1:]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err


def test_batch_output_not_writable_is_a_clear_error(pipeline_dir, tmp_path, capsys):
    labels = tmp_path / "labels.txt"
    labels.write_text("0\n1\n")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["batch", "--pipeline", str(pipeline_dir), "--prompts", str(labels), "--out", str(blocker / "out")]) == 2
    assert "is not writable" in capsys.readouterr().err


def accelerate_batch(pipeline_dir, labels, out):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    accelerate = Path(sys.executable).with_name("accelerate")
    cmd = [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "mmspec.cli", "batch",
           "--pipeline", str(pipeline_dir), "--prompts", str(labels), "--out", str(out), "--decoding", "ar", "--threads", "1"]
    return subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


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
