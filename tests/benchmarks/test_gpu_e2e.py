"""`benchmarks/gpu_e2e.py --dry-run` runs the device script end to end on this CPU (the CUDA
profile on CPU tensors, Triton interpreted, tiny sizes), so that it is ready for a GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmspec.core.device import triton_installed

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("default", "video", "speech", "mesh", "captioner", "lpd")


@pytest.mark.skipif(not triton_installed(), reason="the dry run interprets the Triton kernels: triton must be installed")
def test_gpu_e2e_dry_run_writes_every_table(tmp_path):
    out = tmp_path / "e2e"
    env = dict(os.environ, TRITON_INTERPRET="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_e2e.py"), "--dry-run", "--out", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data = json.loads(out.with_suffix(".json").read_text())
    assert data["errors"] == [] and data["skipped"] == []
    meta = data["meta"]
    assert meta["dry_run"] and meta["batches"] == [1] and meta["seed"] == 0 and meta["torch"] and meta["triton"]

    rows = {(r["model"], r["method"]): r for r in data["decodes"]}
    assert {model for model, _ in rows} == {*SHIPPED, "LlamaGen tiny"}
    for model in (*SHIPPED[:-1], "LlamaGen tiny"):
        for method in ("keyed", "auto"):
            assert rows[model, method]["tokens_as_ar"], (model, method)
    assert ("lpd", "lpd-20") in rows
    for (model, method), r in rows.items():
        assert r["forwards"] > 0 and r["stats_s"] > 0 and r["call_s"] > 0, (model, method)
        assert "Triton verification" in r["device"], (model, method, r["device"])

    kernel, = data["kernel"]
    assert kernel["winners_agreeing"] == 1.0 and kernel["triton_ms"] > 0 and kernel["reference_ms"] > 0
    assert data["forward"] and all(v > 0 for k, v in data["forward"][0].items() if k.isdigit())
    text = out.with_suffix(".md").read_text()
    assert "## Each method against AR" in text and "## Keyed verification" in text
    assert "cuda (Triton verification" in text
