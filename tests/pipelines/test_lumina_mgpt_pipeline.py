"""LuminaMGPTPipeline on the Lumina-mGPT fixture model (tests/fixtures/lumina_mgpt), a
word-level tokenizer over its vocabulary and a tiny random VQGAN of 8,192 codes."""

import json

import pytest
import torch
from PIL import Image

from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from mmspec.models.adapters.chameleon import ChameleonImageGenerator
from mmspec.pipelines import load_pipeline
from mmspec.pipelines.lumina_mgpt import LuminaMGPTPipeline
from tests.helpers.lumina import FIXTURE, fixture_model, lumina_folder, tiny_tokenizer, tiny_vqgan

SIZE = 64  # pixels: 2 x 2 grids of 32, 4 x 4 image tokens


@pytest.fixture(scope="module")
def pipe():
    pipe = LuminaMGPTPipeline(fixture_model(), tiny_tokenizer(), tiny_vqgan(), height=SIZE, width=SIZE)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def call(pipe, seed=0, **kwargs):
    return pipe(**{"prompt": ["a cat", "red dog"], "generator": torch.Generator().manual_seed(seed), **kwargs})


def test_prompt_is_lumina_mgpts_template(pipe):
    ids = pipe.prompt_ids("a cat", 32, 32)
    words = [pipe.processor.convert_ids_to_tokens(i) for i in ids]
    # "32x32" is no word of the tiny tokenizer: it is <unk> here, one token of the real one
    assert words == ["<s>", "Generate", "an", "image", "of", "<unk>", "according", "to", "the", "following", "prompt", ":",
                     "a", "cat", "<reserved08706>"]
    assert ids[-1] == 8710  # the separator, which is also Lumina-mGPT's EOS
    anole = LuminaMGPTPipeline(pipe.model, pipe.processor, pipe.vqgan, style="anole", height=32, width=48)
    assert anole.prompt_ids("a cat", 32, 48) == [0, 8820, 8821, 8710]  # LANTERN's: <s> prompt <reserved08706>
    assert anole.token_grid == (2, 3)


@pytest.mark.parametrize("decoding", ["ar", "mc-sjd", "sjd+lantern", DecodingConfig(method="mc-sjd", window=4, branches=2)])
def test_call_returns_images_and_stats_per_image(pipe, decoding):
    out = call(pipe, decoding=decoding, num_images_per_prompt=2)
    assert len(out.images) == 4 and all(isinstance(im, Image.Image) and im.size == (8, 8) for im in out.images)
    assert len(out.stats) == 4 and all(s.tokens_committed == 20 for s in out.stats)
    grid = out.tokens.view(4, 4, 5)
    assert (grid[..., 4] == 8803).all() and ((grid[..., :4] >= 4) & (grid[..., :4] < 8196)).all()


def test_greedy_pipeline_tokens_are_the_adapters(pipe):
    tokens = call(pipe, decoding="mc-sjd", temperature=0, output_type="tokens").images
    condition = pipe.encode_condition(["a cat", "red dog"], 1, SIZE, SIZE)
    expected, _ = generate(ChameleonImageGenerator(pipe.model, 4, 4), condition, decoding="ar",
                           sampling=SamplingConfig(guidance_scale=4.0, temperature=0, top_k=2000))
    assert torch.equal(tokens, expected)


def test_defaults_are_lumina_mgpts(pipe):
    assert pipe.default_sampling["guidance_scale"] == 4.0 and pipe.default_sampling["top_k"] == 2000
    assert pipe.default_sampling["temperature"] == 1.0
    with pytest.raises(ValueError, match="768x768 pixels need 2356 positions"):  # the default size, past the tiny model's 256
        LuminaMGPTPipeline(pipe.model, pipe.processor, pipe.vqgan)


def test_save_load_round_trip_gives_the_same_tokens(pipe, tmp_path):
    pipe.save_pretrained(tmp_path / "saved")
    loaded = load_pipeline(tmp_path / "saved")
    assert isinstance(loaded, LuminaMGPTPipeline) and (loaded.style, loaded.height, loaded.width) == ("lumina", 64, 64)
    loaded.set_progress_bar_config(disable=True)
    kw = dict(decoding="mc-sjd", output_type="tokens")
    assert torch.equal(call(pipe, seed=3, **kw).images, call(loaded, seed=3, **kw).images)
    assert torch.equal(call(pipe, seed=3, decoding="mc-sjd", output_type="pt").images,
                       call(loaded, seed=3, decoding="mc-sjd", output_type="pt").images)


def test_from_transformers_reads_a_lumina_folder_and_meta_vqgan(pipe, tmp_path):
    folder = lumina_folder(tmp_path)
    pipe.processor.save_pretrained(folder)
    with pytest.raises(ValueError, match="no Chameleon VQGAN"):
        LuminaMGPTPipeline.from_transformers(folder, height=SIZE, width=SIZE)
    vqgan = tmp_path / "tokenizer"
    vqgan.mkdir()
    for name in ("vqgan.yaml", "vqgan.ckpt"):  # the fixture's tiny VQGAN has 16 codes
        (vqgan / name).write_bytes((FIXTURE / name).read_bytes())
    loaded = LuminaMGPTPipeline.from_transformers(folder, vqgan=vqgan, height=SIZE, width=SIZE)
    loaded.set_progress_bar_config(disable=True)
    kw = dict(decoding="ar", temperature=0, output_type="tokens")
    assert torch.equal(call(loaded, **kw).images, call(pipe, **kw).images)
    with pytest.raises(ValueError, match="this VQGAN has 16"):
        call(loaded, decoding="ar", temperature=0)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(height=48), "height must be a positive multiple of 32"),
        (dict(width=0), "width must be a positive multiple of 32"),
        (dict(height=32 * 40), "positions"),
        (dict(prompt=[]), "prompt must be a non-empty string"),
        (dict(decoding="turbo"), "unknown decoding 'turbo'"),
        (dict(guidance_scale=-1.0), "guidance_scale must be >= 0"),
    ],
)
def test_bad_calls_are_one_line_errors(pipe, kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        call(pipe, **kwargs)
    assert "\n" not in str(info.value)


def test_bad_folders_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="not a checkpoint folder"):
        LuminaMGPTPipeline.from_transformers(tmp_path)
    with pytest.raises(ValueError, match="model_index.json is missing"):
        LuminaMGPTPipeline.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="unknown style"):
        LuminaMGPTPipeline(None, None, None, style="emu3")


def test_cli_generates_a_grid_from_a_saved_lumina_folder(pipe, tmp_path, capsys):
    from mmspec.commands.cli import main

    pipe.save_pretrained(tmp_path / "lumina")
    out = tmp_path / "grid.png"
    assert main(["generate", "--pipeline", str(tmp_path / "lumina"), "--prompt", "a cat", "red dog", "--per-class", "1",
                 "--decoding", "mc-sjd", "--window", "4", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "rows: a cat, red dog" in text and "AR needs 20" in text
    assert Image.open(out).width > 2 * 8


def test_cli_batch_writes_one_image_per_prompt(pipe, tmp_path, capsys):
    from mmspec.commands.cli import main

    pipe.save_pretrained(tmp_path / "lumina")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a cat\nred dog\n")
    out = tmp_path / "run"
    assert main(["batch", "--pipeline", str(tmp_path / "lumina"), "--prompts", str(prompts), "--out", str(out),
                 "--decoding", "mc-sjd", "--window", "4"]) == 0
    lines = (out / "manifest.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["stats"]["tokens_committed"] == 20 for line in lines)
    assert len(list(out.rglob("*.png"))) == 2
