import subprocess
import sys

import pytest


def run_python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_kernels_do_not_import_the_engine():
    out = run_python("import sys, mmspec.kernels.verify; print(sorted(m for m in sys.modules if m.startswith('mmspec.')))")
    assert "mmspec.decoding" not in out and "mmspec.core" in out


def test_core_imports_nothing_else_from_mmspec():
    code = ("import sys, mmspec.core.contracts, mmspec.core.layout, mmspec.core.sampling, mmspec.core.rules, "
            "mmspec.core.processors; print(sorted(m for m in sys.modules if m.startswith('mmspec.')))")
    modules = eval(run_python(code))
    assert all(m.startswith("mmspec.core") for m in modules), modules


def test_import_mmspec_defers_every_public_name():
    out = run_python("import sys, mmspec; print(sorted(m for m in sys.modules if m.startswith('mmspec.')), 'torch' in sys.modules)")
    assert out == "[] False"


def test_public_names_resolve():
    from mmspec import (DecodingConfig, Emu3Pipeline, JanusPipeline, LlamaGenPipeline, LuminaMGPTPipeline, SamplingConfig,
                        generate, load_pipeline)
    from mmspec.decoding.generate import generate as engine_generate
    from mmspec.pipelines.llamagen import LlamaGenPipeline as llamagen

    assert generate is engine_generate and LlamaGenPipeline is llamagen
    assert DecodingConfig.from_name("mc-sjd").name == "mc-sjd" and SamplingConfig().guidance_scale == 1.0
    names = {Emu3Pipeline.__name__, JanusPipeline.__name__, LuminaMGPTPipeline.__name__}
    assert names == {"Emu3Pipeline", "JanusPipeline", "LuminaMGPTPipeline"} and callable(load_pipeline)
    import mmspec

    for name in ("CaptioningPipeline", "MeshPipeline", "SpeechPipeline", "VideoPipeline", "LPDPipeline"):
        assert getattr(mmspec, name).__name__ == name  # every pipeline, as diffusers exports them
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        mmspec.nothing
