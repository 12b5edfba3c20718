"""A non-editable install works away from the checkout: the wheel holds the default model
and the demo app, and `mmspec generate` run from another folder finds them."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds and installs a wheel: about 10 s

REPO = Path(__file__).resolve().parent.parent
# what `mmspec generate` and `mmspec demo` read from the installed package
PACKAGE_FILES = [
    "mmspec/assets/default/model_index.json",
    "mmspec/assets/default/transformer/config.json",
    "mmspec/assets/default/transformer/model.safetensors",
    "mmspec/assets/default/vqvae/config.json",
    "mmspec/assets/default/vqvae/model.safetensors",
    "mmspec/assets/default/classifier/config.json",
    "mmspec/assets/default/classifier/model.safetensors",
    "mmspec/assets/default/drafter/config.json",
    "mmspec/assets/default/drafter/model.safetensors",
    "mmspec/assets/speech/model_index.json",
    "mmspec/assets/speech/decoder/model.safetensors",
    "mmspec/assets/speech/codec/model.safetensors",
    "mmspec/assets/captioner/model_index.json",
    "mmspec/assets/captioner/model/model.safetensors",
    "mmspec/assets/mesh/model_index.json",
    "mmspec/assets/mesh/model/model.safetensors",
    "mmspec/assets/video/model_index.json",
    "mmspec/assets/video/transformer/model.safetensors",
    "mmspec/assets/lpd/model_index.json",
    "mmspec/assets/lpd/transformer/model.safetensors",
    "mmspec/apps/demo.py",
    "mmspec/hf_generate/custom_generate/generate.py",  # mmspec.CUSTOM_GENERATE for transformers
]


def run(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, str]:
    """The wheel `pip wheel --no-deps .` builds from this checkout, and the build's output
    (`-v`: pip shows setuptools' warnings only then)."""
    out = tmp_path_factory.mktemp("wheel")
    built = run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(out), str(REPO)], cwd=out)
    return next(out.glob("mmspec-*.whl")), built.stdout + built.stderr


def test_wheel_holds_the_default_model_the_demo_app_and_custom_generate(wheel):
    names = set(zipfile.ZipFile(wheel[0]).namelist())
    assert [f for f in PACKAGE_FILES if f not in names] == []
    assert not any(n.startswith(("tests/", "benchmarks/", "assets/")) for n in names)


def test_metadata_declares_the_license_and_keeps_gradio_optional(wheel):
    """setuptools used to warn about the `project.license` table."""
    assert "BuildBackendWarning" not in wheel[1] and "project.license" not in wheel[1]
    metadata = next(n for n in zipfile.ZipFile(wheel[0]).namelist() if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel[0]).read(metadata).decode()
    assert "License-Expression: Apache-2.0" in text
    requires = [line for line in text.splitlines() if line.startswith("Requires-Dist:")]
    core = [r for r in requires if "extra ==" not in r]
    for optional in ("gradio", "trimesh", "torchaudio", "torchvision", "einops"):
        assert not any(r.split()[1].startswith(optional) for r in core), optional
    assert any(r.startswith("Requires-Dist: gradio") and "extra == \"demo\"" in r for r in requires)


def test_installed_generate_runs_from_another_folder(wheel, tmp_path):
    site = tmp_path / "site"
    run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(site), str(wheel[0])], cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"}
    where = run([sys.executable, "-c", "import mmspec; print(mmspec.__file__)"], cwd=elsewhere, env=env).stdout
    assert Path(where.strip()).is_relative_to(site), where  # the installed copy, not this checkout
    out = elsewhere / "grid.png"
    run([sys.executable, "-m", "mmspec.commands.cli", "generate", "--classes", "0", "--per-class", "1", "--out", str(out)],
        cwd=elsewhere, env=env)
    assert out.stat().st_size > 0
