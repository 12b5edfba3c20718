import numpy as np
import pytest
import torch
from PIL import Image

from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from mmspec.core.sampling import SamplingConfig
from mmspec.models.adapters.janus import JanusCondition, JanusImageGenerator
from mmspec.pipelines.emu3 import Emu3Pipeline
from mmspec.pipelines.janus import JanusPipeline
from tests.helpers.tiny_models import JANUS_GRID, janus_inputs, tiny_janus

T = JANUS_GRID[0] * JANUS_GRID[1]
PIXELS = (8, 8)  # the tiny VQ upsamples the 4 x 4 codes 2x


@pytest.fixture(scope="module")
def pipe():
    pipe = JanusPipeline(*tiny_janus())
    pipe.set_progress_bar_config(disable=True)
    return pipe


def call(pipe, seed=0, **kwargs):
    return pipe(**{"prompt": ["a cat", "red dog blue"], "generator": torch.Generator().manual_seed(seed), **kwargs})


@pytest.mark.parametrize("decoding", ["ar", "mc-sjd", "zipar+mc-sjd+gsd"])
def test_call_returns_images_and_stats_per_image(pipe, decoding):
    out = call(pipe, decoding=DecodingConfig.from_name(decoding, zipar_window=2), num_images_per_prompt=2)
    assert len(out.images) == 4 and all(isinstance(im, Image.Image) and im.size == PIXELS for im in out.images)
    assert len(out.stats) == 4 and all(s.tokens_committed == T for s in out.stats)
    assert out.tokens.shape == (4, T)


def test_guidance_1_runs_no_unconditional_rows(pipe):
    """transformers 5.24's own Janus `generate` fails at guidance 1 (it doubles the batch
    without merging the halves); the pipeline decodes conditional rows alone."""
    out = call(pipe, decoding="mc-sjd", guidance_scale=1.0, output_type="tokens")
    assert out.images.shape == (2, T) and ((out.images >= 0) & (out.images < JanusImageGenerator(pipe.model).layout().vocab_size)).all()


def test_output_types(pipe):
    np_images = call(pipe, decoding="ar", output_type="np").images
    pt_images = call(pipe, decoding="ar", output_type="pt").images
    assert np_images.shape == (2, 8, 8, 3) and np_images.dtype == np.float32
    assert pt_images.shape == (2, 3, 8, 8) and 0 <= pt_images.min() <= pt_images.max() <= 1


def test_greedy_pipeline_tokens_are_the_adapters(pipe):
    """The pipeline tokenizes as `JanusProcessor(..., generation_mode="image")` and decodes
    with the adapter: greedy AR through both gives the same codes."""
    tokens = call(pipe, decoding="ar", temperature=0, guidance_scale=3.0, output_type="tokens").images
    enc = janus_inputs(pipe.processor, ["a cat", "red dog blue"])
    expected, _ = generate(JanusImageGenerator(pipe.model), JanusCondition(enc.input_ids, enc.attention_mask), decoding="ar",
                           sampling=SamplingConfig(guidance_scale=3.0, temperature=0))
    assert torch.equal(tokens, expected)


def test_save_load_round_trip_gives_the_same_tokens(pipe, tmp_path):
    pipe.save_pretrained(tmp_path)
    loaded = JanusPipeline.from_pretrained(tmp_path)
    loaded.set_progress_bar_config(disable=True)
    kw = dict(decoding="mc-sjd", output_type="tokens")
    assert torch.equal(call(pipe, seed=3, **kw).images, call(loaded, seed=3, **kw).images)
    with pytest.raises(ValueError, match="holds a 'JanusPipeline' pipeline, not a Emu3Pipeline") as info:
        Emu3Pipeline.from_pretrained(tmp_path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(prompt=[]), "prompt must be a non-empty string"),
        (dict(prompt=["a", ""]), "prompt must be a non-empty string"),
        (dict(guidance_scale=-1.0), "guidance_scale must be >= 0"),
        (dict(decoding="turbo"), "unknown decoding 'turbo'"),
        (dict(num_images_per_prompt=1.5), "num_images_per_prompt must be an integer >= 1"),
    ],
)
def test_bad_input_is_a_one_line_error(pipe, kwargs, message):
    with pytest.raises(ValueError, match=message) as info:
        call(pipe, **kwargs)
    assert "\n" not in str(info.value)


def test_front_end_attributes_device_and_dtype(pipe):
    assert pipe.condition_kind == "prompt" and pipe.class_names is None
    assert pipe.token_grid == JANUS_GRID and pipe.sequence_length == T
    assert pipe.default_sampling == {"guidance_scale": 5.0, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    assert pipe.to("cpu") is pipe and pipe.device == torch.device("cpu") and pipe.dtype == torch.float32
    with pytest.raises(ValueError, match="zipar_window 8 is longer than a 4-token row"):
        pipe.check_decoding("zipar+mc-sjd")


def test_image_i_of_a_batch_with_a_generator_list_is_the_same_seed_alone(pipe):
    kw = dict(decoding="mc-sjd", output_type="tokens")
    batch = pipe(["a cat", "red dog"], generator=[torch.Generator().manual_seed(s) for s in (1, 2)], **kw).images
    alone = pipe("red dog", generator=torch.Generator().manual_seed(2), **kw).images
    assert torch.equal(batch[1], alone[0])


def test_from_pretrained_honours_torch_dtype_and_refuses_unknown_keywords(pipe, tmp_path):
    """Unknown keywords used to go to transformers, which ignored `device_map` here."""
    pipe.save_pretrained(tmp_path)
    assert JanusPipeline.from_pretrained(tmp_path, torch_dtype=torch.bfloat16).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="JanusPipeline.from_pretrained got unknown keyword.*low_cpu_mem_usage"):
        JanusPipeline.from_pretrained(tmp_path, low_cpu_mem_usage=True)
