import os

import numpy as np
import pytest
import torch
from PIL import Image

from mmspec.decoding.config import DECODINGS, DecodingConfig
from mmspec.pipelines.emu3 import Emu3Pipeline
from mmspec.pipelines.llamagen import LlamaGenPipeline
from tests.helpers.tiny_models import EMU3_GRID, EMU3_SIZE, tiny_emu3

H, W = EMU3_GRID
PIXELS = (4 * W, 4 * H)  # PIL (width, height): the tiny VQ upsamples 4x


@pytest.fixture(scope="module")
def pipe():
    pipe = Emu3Pipeline(*tiny_emu3(), **EMU3_SIZE)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def small(name: str) -> DecodingConfig:
    """`name` with windows that fit the 2 x 4 grid (the defaults, 16 and 8, are refused)."""
    return DecodingConfig.from_name(name, window=4, zipar_window=2)


def call(pipe, seed=0, **kwargs):
    return pipe(**{**EMU3_SIZE, "prompt": ["a cat", "red dog"], "generator": torch.Generator().manual_seed(seed), **kwargs})


@pytest.mark.parametrize("decoding", ["ar", "mc-sjd", "zipar+mc-sjd"])
def test_call_returns_images_and_stats_per_image(pipe, decoding):
    out = call(pipe, decoding=small(decoding), num_images_per_prompt=2)
    assert len(out.images) == 4 and all(isinstance(im, Image.Image) and im.size == PIXELS for im in out.images)
    assert len(out.stats) == 4 and all(s.tokens_committed == H * (W + 1) for s in out.stats)
    assert out.tokens.shape == (4, H * (W + 1))


def test_output_types(pipe):
    np_images = call(pipe, decoding="ar", output_type="np").images
    pt_images = call(pipe, decoding="ar", output_type="pt").images
    assert np_images.shape == (2, PIXELS[1], PIXELS[0], 3) and np_images.dtype == np.float32
    assert pt_images.shape == (2, 3, PIXELS[1], PIXELS[0]) and 0 <= pt_images.min() <= pt_images.max() <= 1
    images, stats = call(pipe, decoding="ar", return_dict=False)
    assert len(images) == len(stats) == 2


@pytest.mark.parametrize("name", DECODINGS)
def test_every_method_respects_the_forced_layout(pipe, name):
    """Every row ends with the end-of-line token and holds only visual tokens before it,
    ZipAR's side-by-side rows included (a 3 x 4 image; rows open after 2 tokens)."""
    config = DecodingConfig.from_name(name, window=3, zipar_window=2)
    tokens = call(pipe, decoding=config, output_type="tokens", ratio="3:2", image_area=864).images
    grid = tokens.view(2, 3, 5)
    mapping = pipe.model.vocabulary_mapping
    assert grid[:, :, -1].eq(mapping.eol_token_id).all()
    assert torch.isin(grid[:, :, :-1], torch.tensor(mapping.image_tokens)).all()


def test_save_load_round_trip_gives_the_same_tokens(pipe, tmp_path):
    pipe.save_pretrained(tmp_path)
    loaded = Emu3Pipeline.from_pretrained(tmp_path)
    loaded.set_progress_bar_config(disable=True)
    kw = dict(decoding=small("mc-sjd"), output_type="tokens", negative_prompt="bad ugly")
    assert torch.equal(call(pipe, seed=3, **kw).images, call(loaded, seed=3, **kw).images)


def test_an_emu3_checkpoint_given_to_the_llamagen_pipeline_is_a_clear_error(pipe, tmp_path):
    pipe.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="holds a 'Emu3Pipeline' pipeline, not a LlamaGenPipeline") as info:
        LlamaGenPipeline.from_pretrained(tmp_path)
    assert "\n" not in str(info.value)


def test_call_does_not_change_the_model(pipe):
    before = {k: v.clone() for k, v in pipe.model.state_dict().items()}
    call(pipe, decoding=small("sjd"), output_type="tokens")
    assert all(torch.equal(v, pipe.model.state_dict()[k]) for k, v in before.items())


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(prompt=[]), "prompt must be a non-empty string"),
        (dict(guidance_scale=-1.0), "guidance_scale must be >= 0"),
        (dict(decoding="turbo"), "unknown decoding 'turbo'"),
        (dict(output_type="jpeg"), "unknown output_type 'jpeg'"),
        (dict(negative_prompt=["a", "b", "c"]), "negative_prompt has 3 entries for 2 prompts"),
        (dict(num_images_per_prompt=0), "num_images_per_prompt must be an integer >= 1"),
    ],
)
def test_bad_input_is_a_one_line_error(pipe, kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        call(pipe, **kwargs)
    assert "\n" not in str(info.value)


class Payload:
    """Unpickling this would run `os.system`: what an evil `.bin` file holds."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_front_end_attributes_device_and_dtype(pipe):
    assert pipe.condition_kind == "prompt" and pipe.class_names is None
    assert pipe.token_grid == (H, W + 1) and pipe.sequence_length == H * (W + 1)
    assert pipe.default_sampling == {"guidance_scale": 3.0, "temperature": 1.0, "top_k": 2048, "top_p": 1.0}
    assert pipe.to("cpu") is pipe and pipe.device == torch.device("cpu") and pipe.dtype == torch.float32
    assert pipe.max_images_per_call >= 1
    with pytest.raises(ValueError, match="window 16 is longer than the 8-token sequence"):
        pipe.check_decoding("mc-sjd")


def test_image_i_of_a_batch_with_a_generator_list_is_the_same_seed_alone(pipe):
    kw = dict(decoding=small("mc-sjd"), output_type="tokens", **EMU3_SIZE)
    batch = pipe(["a cat", "red dog"], generator=[torch.Generator().manual_seed(s) for s in (1, 2)], **kw).images
    alone = pipe("red dog", generator=torch.Generator().manual_seed(2), **kw).images
    assert torch.equal(batch[1], alone[0])


def test_size_is_saved_and_torch_dtype_honoured(pipe, tmp_path):
    pipe.save_pretrained(tmp_path)
    loaded = Emu3Pipeline.from_pretrained(tmp_path, torch_dtype=torch.bfloat16)
    assert loaded.dtype == torch.bfloat16 and loaded.token_grid == pipe.token_grid
    with pytest.raises(ValueError, match="got unknown keyword.*device_map") as info:
        Emu3Pipeline.from_pretrained(tmp_path, device_map="auto")
    assert "\n" not in str(info.value)


def test_damaged_or_evil_weights_are_one_line_errors_and_nothing_runs(pipe, tmp_path):
    pipe.save_pretrained(tmp_path)
    weights = tmp_path / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ValueError, match=r"cannot load .*model") as info:
        Emu3Pipeline.from_pretrained(tmp_path)
    assert "\n" not in str(info.value)
    weights.unlink()
    marker = tmp_path / "ran"
    torch.save({"lm_head.weight": Payload(marker)}, tmp_path / "model" / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"cannot load .*model: a pickled file there needs arbitrary unpickling") as info:
        Emu3Pipeline.from_pretrained(tmp_path)
    assert "\n" not in str(info.value) and not marker.exists()


def test_non_finite_weights_are_refused_at_load(pipe, tmp_path):
    pipe.save_pretrained(tmp_path)
    model = Emu3Pipeline.from_pretrained(tmp_path).model
    with torch.no_grad():
        model.lm_head.weight.fill_(float("nan"))
    model.save_pretrained(tmp_path / "model")
    with pytest.raises(ValueError, match=r"model is corrupt: its tensor 'lm_head.weight' holds NaN"):
        Emu3Pipeline.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(ratio="wide"), "ratio must be 'w:h' with positive integers"),
        (dict(image_area=10**9), "this model takes 1 to 128 positions"),
        (dict(guidance_scale=float("inf")), "guidance_scale must be finite and at most 100"),
    ],
)
def test_sizes_and_guidance_past_the_model_are_refused(pipe, kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        call(pipe, **kwargs)
    assert "\n" not in str(info.value)
