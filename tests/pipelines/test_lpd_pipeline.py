import pytest
import torch

from mmspec.assets import DEFAULT_ASSETS
from mmspec.models.networks.lpd import LPD, LPDConfig
from mmspec.pipelines import load_pipeline
from mmspec.pipelines.llamagen import LlamaGenPipeline
from mmspec.pipelines.lpd import LPDPipeline


@pytest.fixture(scope="module")
def pipe():
    raster = load_pipeline(DEFAULT_ASSETS)
    torch.manual_seed(0)
    model = LPD(LPDConfig(img_size=64, vqgan_stride=4, decoder_embed_dim=32, decoder_depth=1, decoder_num_heads=2,
                          class_num=10, vqgan_vocab_size=512)).eval()
    return LPDPipeline(model, raster.vqvae, classifier=raster.classifier, class_names=raster.class_names,
                       default_sampling={"guidance_scale": 3.0})


@pytest.mark.parametrize("steps", [20, 32])
def test_a_call_takes_one_forward_per_group(pipe, steps):
    out = pipe([0, 3], num_inference_steps=steps, generator=torch.Generator().manual_seed(0), output_type="pt")
    assert out.images.shape == (2, 3, 64, 64) and out.tokens.shape == (2, 256)
    assert [s.forward_passes for s in out.stats] == [steps, steps]
    commit = out.stats[0].commit_iteration[0]
    assert torch.bincount(commit).tolist() == list(pipe.order(steps).group_sizes)


def test_the_commit_map_is_spread_over_the_grid_not_rows(pipe):
    out = pipe(1, num_inference_steps=20, generator=torch.Generator().manual_seed(1), output_type="tokens")
    commit = out.stats[0].commit_iteration[0].view(16, 16)
    rows_touched_by_middle_step = (commit == 10).any(1).sum()
    assert rows_touched_by_middle_step >= 6  # a raster schedule would touch one or two rows


def test_generators_make_calls_reproducible_and_per_image(pipe):
    a = pipe([2, 2], generator=[torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)], output_type="tokens")
    b = pipe(2, generator=torch.Generator().manual_seed(6), output_type="tokens")
    assert torch.equal(a.images[1], b.images[0])


def test_the_saved_guidance_schedule_is_the_default_of_a_call(pipe, tmp_path):
    constant = LPDPipeline(pipe.transformer, pipe.vqvae, default_sampling={"guidance_scale": 3.0}, guidance_schedule="constant")
    constant.save_pretrained(tmp_path)
    loaded = load_pipeline(tmp_path)
    assert loaded.guidance_schedule == "constant" and pipe.guidance_schedule == "linear"
    # keyed Gumbel-max keeps a sample where its distribution barely moves: on this random model
    # the schedules differ at 2 of 256 cells for seed 0 (at none for seed 3)
    g = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    tokens = {s: pipe(1, guidance_schedule=s, generator=g(), output_type="tokens").images for s in ("linear", "constant")}
    assert not torch.equal(tokens["linear"], tokens["constant"])
    assert torch.equal(loaded(1, generator=g(), output_type="tokens").images, tokens["constant"])
    assert torch.equal(pipe(1, generator=g(), output_type="tokens").images, tokens["linear"])
    with pytest.raises(ValueError, match="unknown guidance schedule 'cosine'"):
        LPDPipeline(pipe.transformer, pipe.vqvae, guidance_schedule="cosine")


def test_save_and_load_round_trip(pipe, tmp_path):
    pipe.save_pretrained(tmp_path)
    loaded = load_pipeline(tmp_path)
    assert isinstance(loaded, LPDPipeline) and loaded.class_names == pipe.class_names
    g = lambda: torch.Generator().manual_seed(2)  # noqa: E731
    assert torch.equal(loaded(4, generator=g(), output_type="tokens").images, pipe(4, generator=g(), output_type="tokens").images)


@pytest.mark.parametrize("kwargs, message", [
    (dict(class_labels=0, num_inference_steps=24), "no group-size table for 24 steps on a 16x16 grid; tables exist for 20, 32, 256 steps"),
    (dict(class_labels=12), "class label 12 is out of range"),
    (dict(class_labels=0, output_type="gif"), "unknown output_type"),
    (dict(class_labels=0, guidance_schedule="cosine"), "unknown guidance schedule"),
])
def test_bad_calls_are_one_line_errors(pipe, kwargs, message):
    with pytest.raises(ValueError, match=message):
        pipe(**kwargs)


def test_an_lpd_checkpoint_given_to_the_raster_pipeline_is_refused(pipe, tmp_path):
    pipe.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="holds a 'LPDPipeline' pipeline, not a LlamaGenPipeline"):
        LlamaGenPipeline.from_pretrained(tmp_path)
    from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT

    with pytest.raises(ValueError, match="this is an LPD checkpoint"):
        LlamaGenGPT.from_checkpoint(tmp_path / "transformer" / "model.safetensors", LlamaGenConfig(dim=32, n_layer=1, n_head=2))


def test_decodings_by_name_as_the_cli_gives_them(pipe):
    from mmspec.decoding.config import DecodingConfig

    assert pipe.check_decoding("lpd-32").steps == 32
    assert pipe.check_decoding(DecodingConfig.from_name("ar")).describe() == "ar"
    out = pipe(0, decoding="ar", output_type="tokens", generator=torch.Generator().manual_seed(0))
    assert out.stats[0].forward_passes == 256 and out.stats[0].method == "ar"
    with pytest.raises(ValueError, match="an LPD pipeline decodes group by group: choose lpd-<steps>"):
        pipe.check_decoding(DecodingConfig.from_name("mc-sjd"))
    with pytest.raises(ValueError, match="no group-size table for 24 steps"):
        pipe.check_decoding("lpd-24")


@pytest.mark.parametrize("steps", [20, 32])
def test_callback_and_progress_bar_advance_after_every_forward(pipe, steps, monkeypatch):
    calls, bars = [], []
    real_bar = pipe.progress_bar

    def progress_bar(**kwargs):  # records the bar's count after each forward
        bar = real_bar(**kwargs)
        update = bar.update
        bar.update = lambda n=1: (update(n), bars.append(bar.n))
        return bar

    monkeypatch.setattr(pipe, "progress_bar", progress_bar)
    callback = lambda pipe, step, committed, kw: calls.append((step, committed))  # noqa: E731
    out = pipe([0, 3], num_inference_steps=steps, generator=torch.Generator().manual_seed(0), output_type="tokens",
               callback_on_step_end=callback)
    assert len(calls) == out.stats[0].forward_passes == steps
    sizes = pipe.order(steps).group_sizes
    done = [sum(sizes[: k + 1]) for k in range(steps)]
    assert calls == list(enumerate(done)) and bars == done
    calls.clear()  # a generator per image: still one batch, a key per image
    out = pipe([0, 3], num_inference_steps=steps, generator=[torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)],
               output_type="tokens", callback_on_step_end=callback)
    assert len(calls) == out.stats[0].forward_passes == steps
    assert calls == list(enumerate(done))
