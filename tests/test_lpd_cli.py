import json

import pytest
import torch

from mmspec.assets import DEFAULT_ASSETS
from mmspec.commands.cli import main
from mmspec.models.networks.lpd import LPD, LPDConfig
from mmspec.pipelines import load_pipeline
from mmspec.pipelines.lpd import LPDPipeline


@pytest.fixture(scope="module")
def lpd_dir(tmp_path_factory):
    raster = load_pipeline(DEFAULT_ASSETS)
    torch.manual_seed(0)
    model = LPD(LPDConfig(img_size=64, vqgan_stride=4, decoder_embed_dim=32, decoder_depth=1, decoder_num_heads=2,
                          class_num=10, vqgan_vocab_size=512)).eval()
    folder = tmp_path_factory.mktemp("lpd")
    LPDPipeline(model, raster.vqvae, class_names=raster.class_names).save_pretrained(folder)
    return folder


def test_generate_defaults_to_lpd_20_and_compares_with_one_cell_per_forward(lpd_dir, tmp_path, capsys):
    out = tmp_path / "grid.png"
    assert main(["generate", "--pipeline", str(lpd_dir), "--classes", "0", "3", "--per-class", "2", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert out.is_file()
    assert "decoding: lpd-20 (exact" in text and "20.0 per image" in text and "auto chose" not in text
    assert "against AR on the same 2 row(s)" in text and "256 forwards per image" in text


def test_batch_and_bench_run_lpd_decodings(lpd_dir, tmp_path, capsys):
    prompts = tmp_path / "labels.txt"
    prompts.write_text("1\n2\n")
    assert main(["batch", "--pipeline", str(lpd_dir), "--prompts", str(prompts), "--out", str(tmp_path / "b"), "--decoding", "lpd-32"]) == 0
    settings = json.loads((tmp_path / "b" / "run.json").read_text())["settings"]
    assert settings["decoding"]["steps"] == 32
    assert main(["bench", "--pipeline", str(lpd_dir), "--classes", "0", "--methods", "ar", "lpd-20", "lpd-32",
                 "--out-dir", str(tmp_path / "bench")]) == 0
    table = (tmp_path / "bench" / "bench.md").read_text()
    assert "| lpd-20 | yes | 20.0 | 12.8 |" in table and "| lpd-32 | yes | 32.0 | 8.0 |" in table


@pytest.mark.parametrize("argv, message", [
    (["--decoding", "mc-sjd"], "an LPD pipeline decodes group by group: choose lpd-<steps>"),
    (["--decoding", "lpd-24"], "no group-size table for 24 steps on a 16x16 grid"),
])
def test_bad_lpd_decodings_are_one_line_errors(lpd_dir, tmp_path, capsys, argv, message):
    assert main(["generate", "--pipeline", str(lpd_dir), "--out", str(tmp_path / "g.png"), *argv]) == 2
    assert message in capsys.readouterr().err
