"""CosmosPipeline on a tiny pair: the original's tokenizer fixture and a random CosmosAR."""

import pytest
import torch

from mmspec import CosmosPipeline, load_pipeline
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.schedules import Frames
from tests.helpers.cosmos import TOKENIZER, tiny_video, write_tiny_checkpoint

FIXTURE_NETWORK = TOKENIZER.parent / "cosmos" / "tiny"


@pytest.fixture(scope="module")
def pipe(tmp_path_factory):
    pipe = CosmosPipeline.from_cosmos(write_tiny_checkpoint(tmp_path_factory.mktemp("cosmos")), TOKENIZER)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_from_cosmos_reads_the_published_layout(pipe):
    """model.pt + config.json and encoder.jit/decoder.jit: 17 frames of 64 x 64, 1 or 9 given."""
    assert pipe.latent_shape == (3, 4, 4) and pipe.frame_size == (64, 64) and pipe.num_frames == 17
    assert pipe.input_frame_choices == [1, 9]
    assert pipe.default_sampling["temperature"] == 1.0 and pipe.default_sampling["top_p"] == 0.8


@pytest.mark.parametrize("given", [1, 9])
def test_the_condition_is_the_tokenizers_codes_and_the_video_is_the_whole_latent_decoded(pipe, given):
    video = tiny_video()
    out = pipe(video, num_input_frames=given, decoding="ar", output_type="pt", generator=torch.Generator().manual_seed(0))
    t = 1 if given == 1 else 2
    codes = pipe.tokenizer.encode(video[None].movedim(1, 2) * 2 - 1)
    assert torch.equal(out.tokens[:, :t * 16], codes[:, :t].flatten(1))
    assert out.videos.shape == (1, 17, 3, 64, 64)
    decoded = pipe.tokenizer.decode(out.tokens.view(1, 3, 4, 4)).movedim(2, 1).clamp(-1, 1)
    torch.testing.assert_close(out.videos, (decoded + 1) / 2)
    assert out.stats[0].forward_passes == (3 - t) * 16


@pytest.mark.parametrize("decoding", [
    DecodingConfig("sjd", window=6), DecodingConfig("mc-sjd", init="previous-frame"),
    DecodingConfig("mc-sjd", window=4, branches=2, branch_slots=2, branch_length=1), DecodingConfig("auto"),
], ids=lambda d: d.describe())
def test_greedy_tokens_of_every_exact_method_are_ars(pipe, decoding):
    video = tiny_video(9)
    ar = pipe(video, num_input_frames=9, decoding="ar", temperature=0, output_type="tokens").tokens
    assert torch.equal(pipe(video, num_input_frames=9, decoding=decoding, temperature=0, output_type="tokens").tokens, ar)


def test_sampled_auto_gives_ars_tokens_for_a_seed(pipe):
    """Keyed sampling at the original's defaults (temperature 1.0, top-p 0.8)."""
    video = torch.stack([tiny_video(seed=0), tiny_video(seed=1)])
    run = lambda d: pipe(video, decoding=d, num_videos_per_prompt=2, output_type="tokens",  # noqa: E731
                         generator=torch.Generator().manual_seed(4)).tokens
    ar = run("ar")
    assert len(ar) == 4 and not torch.equal(ar[0], ar[1])
    assert torch.equal(run("auto"), ar)
    assert torch.equal(run(DecodingConfig("keyed", init="previous-frame")), ar)


def test_save_and_load_round_trip(pipe, tmp_path):
    pipe.save_pretrained(tmp_path / "saved")
    again = load_pipeline(tmp_path / "saved")
    assert isinstance(again, CosmosPipeline)
    video = tiny_video(1)
    run = lambda p: p(video, decoding="ar", output_type="tokens", generator=torch.Generator().manual_seed(1)).tokens  # noqa: E731
    assert torch.equal(run(again), run(pipe))


def test_the_safety_checker_sees_every_video_before_it_is_returned(pipe):
    seen = []
    pipe.safety_checker = lambda videos: (seen.append(videos.shape), torch.zeros_like(videos))[1]
    try:
        out = pipe(tiny_video(1), decoding="ar", output_type="pt", generator=torch.Generator().manual_seed(0))
    finally:
        pipe.safety_checker = None
    assert seen == [(1, 17, 3, 64, 64)] and float(out.videos.abs().max()) == 0


@pytest.mark.parametrize("call, message", [
    (lambda p: p(tiny_video()[:, :, :32]), "frames are 3 x 64 x 64"),
    (lambda p: p(tiny_video(5), num_input_frames=9), "fewer than the 9"),
    (lambda p: p(tiny_video(), num_input_frames=5), "num_input_frames must be one of 1, 9"),
    (lambda p: p(tiny_video(), num_input_frames=17), "num_input_frames must be one of 1, 9"),
    (lambda p: p(tiny_video() * 3), "in [0, 1]"),
    (lambda p: p("video.mp4"), "video must be"),
    (lambda p: p(tiny_video(), decoding=DecodingConfig("sjd", window=64)), "window"),
])
def test_bad_input_is_refused_in_one_line(pipe, call, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")) as error:
        call(pipe)
    assert "\n" not in str(error.value)


def test_folders_that_are_no_pair_are_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="1728 codes: they are not a pair"):
        CosmosPipeline.from_cosmos(FIXTURE_NETWORK, TOKENIZER)
    with pytest.raises(ValueError, match="holds no encoder.jit"):
        (tmp_path / "empty").mkdir()
        CosmosPipeline.from_cosmos(FIXTURE_NETWORK, tmp_path / "empty")
    with pytest.raises(ValueError, match="does not exist"):
        CosmosPipeline.from_cosmos(tmp_path / "nowhere", TOKENIZER)


@pytest.mark.parametrize("name", [
    "mc-sjd+lantern", "sjd+gsd", DecodingConfig.from_name("zipar+mc-sjd", zipar_window=2),
    DecodingConfig("mc-sjd", init="previous-frame", schedule=Frames(rows=2)),
], ids=str)
def test_relaxed_methods_run_on_the_fsq_code_vectors(pipe, name):
    """LANTERN and GSD take their latent neighbourhoods from the FSQ vectors; ZipAR opens
    rows, the frame schedule frames."""
    layout = pipe.transformer.layout(token_embeddings=pipe.tokenizer.code_vectors())
    assert layout.token_embeddings.shape == (1728, 6)
    out = pipe(tiny_video(1), decoding=name, output_type="tokens", generator=torch.Generator().manual_seed(0))
    assert out.tokens.shape == (1, 48) and out.stats[0].forward_passes <= 32


def test_previous_frame_drafts_of_the_first_frame_copy_the_conditioning_frame(pipe):
    """The layout says its prompt ends with the conditioning frames: copies of the frame
    before read them for the first generated frame, and the frames drafted after that."""
    from mmspec.decoding.drafts import Copy, first_drafts

    pipe.transformer.condition_frames = 1
    layout = pipe.transformer.layout()
    assert layout.prompt_frames == 1 and layout.shape == (2, 4, 4)
    prompt = torch.randint(1728, (2, 16, 1), generator=torch.Generator().manual_seed(0))
    history = torch.full((2, 32, 1), -1)
    positions = torch.arange(32).expand(2, -1)
    drafts = first_drafts(Copy("frame"), history, positions, layout, prompt, torch.zeros(2, 32, 1))
    assert torch.equal(drafts[:, :16], prompt) and torch.equal(drafts[:, 16:], prompt)
    without = first_drafts(Copy("frame"), history, positions, layout, None, torch.zeros(2, 32, 1))
    assert (without == -1).all()


def test_auto_scores_previous_frame_copies_of_the_first_frame_against_the_conditioning_frame(pipe):
    """auto starts with previous-frame drafts on such a layout, and counts their hits on the
    first frame from the prompt's frame (else it would see none there and switch away)."""
    from mmspec.decoding.auto.acceptance import DrafterHits, first_copy_axis
    from mmspec.decoding.auto.chooser import drafter_options

    pipe.transformer.condition_frames = 1
    layout = pipe.transformer.layout()
    drafters = drafter_options(layout, True)
    assert first_copy_axis(drafters[0]) == "frame"
    prompt = torch.randint(1728, (1, 16, 1), generator=torch.Generator().manual_seed(0))
    tokens = torch.cat([prompt, torch.full((1, 16, 1), -1)], 1)  # the first frame repeats the conditioning frame
    new = torch.arange(32)[None] < 16
    with_prompt = DrafterHits(drafters, layout, "cpu", prompt=prompt)
    with_prompt.observe(tokens, new, new)
    assert with_prompt.hits[0] == 16 and with_prompt.best() is drafters[0]
    alone = DrafterHits(drafters, layout, "cpu")
    alone.observe(tokens, new, new)
    assert alone.seen[0] == 0
