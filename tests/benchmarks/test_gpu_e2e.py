"""benchmarks/gpu_e2e.py runs end to end (a tiny size on CPU), so that it is ready for a GPU."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_gpu_e2e_writes_its_tables_on_cpu(tmp_path):
    out = tmp_path / "e2e"
    cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_e2e.py"), "--device", "cpu", "--sizes", "tiny", "--batches", "1", "2",
           "--windows", "1", "4", "--loop-tokens", "12", "--repeats", "2", "--out", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    data = json.loads(out.with_suffix(".json").read_text())
    assert [r["batch"] for r in data["forward"]] == [1, 2] and all(r["1"] > 0 and r["4"] > 0 for r in data["forward"])
    loop = data["loop"][0]
    assert loop["iterations"] >= 1 and loop["forward_ms"] > 0 and loop["outside_share"] > 0
    parts = sum(v for k, v in loop.items() if k.endswith(" ms") and k not in ("forward_ms", "outside_ms"))
    assert abs(parts - loop["outside_ms"]) < 1e-6 * max(1.0, parts)
    assert "## The loop around the forward" in out.with_suffix(".md").read_text()
    auto = data["auto"][0]
    assert auto["cost_curve"]["1"] == 1.0 and auto["auto_forwards"] >= 1 and "window" in auto["choices"]
