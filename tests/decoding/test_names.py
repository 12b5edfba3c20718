"""One grammar of decoding names (`mmspec.decoding.names`) for every place that takes one:
the names the docs list parse to the configs they describe, bad names are one-line errors,
LPD's names go through `generate`, and the pipelines, verbs and apps use the parser."""

import re
from argparse import Namespace
from pathlib import Path

import pytest
import torch

from mmspec.core.rules import ExactRule, GSDRule, LanternRule, PCGRule
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DECODINGS, DecodingConfig, LPDDecoding, as_lpd_decoding, parse_decoding
from mmspec.decoding.generate import as_decoding, generate
from mmspec.decoding.lpd import generate_lpd
from mmspec.decoding.names import DecodingName, parse_name
from mmspec.decoding.orders import LocalityOrder
from mmspec.decoding.schedules import Raster, ZipAR

ROOT = Path(__file__).resolve().parents[2]

# name: (method, rule type, schedule type, drafter name or None, redraft)
# from README "What is supported" (drafting, acceptance, schedule, first drafts, prompt-lookup, auto+gsd),
# its engine-features table (random, left, previous-step, lookup+above) and docs/engine.md
# (mc-sjd+lookup, phrase-lookup, the zipar+ names)
DOCUMENTED = {
    "auto": ("auto", ExactRule, Raster, None, False),
    "ar": ("ar", ExactRule, Raster, "random", False),  # init unused by AR, at its default
    "sjd": ("sjd", ExactRule, Raster, "random", False),
    "mc-sjd": ("mc-sjd", ExactRule, Raster, "random", False),
    "sjd+lantern": ("sjd", LanternRule, Raster, "random", False),
    "mc-sjd+lantern": ("mc-sjd", LanternRule, Raster, "random", False),
    "mc-sjd+gsd": ("mc-sjd", GSDRule, Raster, "random", False),
    "mc-sjd+pcg": ("mc-sjd", PCGRule, Raster, "random", False),
    "auto+gsd": ("auto", GSDRule, Raster, None, False),
    "zipar": ("ar", ExactRule, ZipAR, "random", False),
    "zipar+mc-sjd": ("mc-sjd", ExactRule, ZipAR, "random", False),
    "zipar+mc-sjd+gsd": ("mc-sjd", GSDRule, ZipAR, "random", False),
    "lookup": ("sjd", ExactRule, Raster, "lookup", False),
    "mc-sjd+lookup": ("mc-sjd", ExactRule, Raster, "lookup", False),
    "mc-sjd+above": ("mc-sjd", ExactRule, Raster, "above", False),
    "mc-sjd+left": ("mc-sjd", ExactRule, Raster, "left", False),
    "mc-sjd+random": ("mc-sjd", ExactRule, Raster, "random", False),
    "mc-sjd+previous-frame": ("mc-sjd", ExactRule, Raster, "previous-frame", False),
    "mc-sjd+previous-step": ("mc-sjd", ExactRule, Raster, "previous-step", False),
    "mc-sjd+lookup+above": ("mc-sjd", ExactRule, Raster, "lookup+above", False),
    "sjd+phrase-lookup": ("sjd", ExactRule, Raster, "phrase-lookup", False),
    "prompt-lookup": ("sjd", ExactRule, Raster, "phrase-lookup", True),
}


@pytest.mark.parametrize("name", DOCUMENTED)
def test_every_documented_name_parses_to_the_config_it_describes(name):
    method, rule, schedule, drafter, redraft = DOCUMENTED[name]
    config = parse_decoding(name)
    assert isinstance(config, DecodingConfig) and config == DecodingConfig.from_name(name) == as_decoding(name)
    assert (config.method, type(config.rule), type(config.scheduler), config.redraft) == (method, rule, schedule, redraft)
    assert (None if config.drafter is None else config.drafter.name) == drafter
    assert config.exact == (rule is ExactRule and schedule is Raster)
    assert parse_decoding(name.upper()) == config  # names are case-insensitive


def test_every_canonical_name_round_trips_and_parts_come_in_any_order():
    for name in DECODINGS:
        assert DecodingConfig.from_name(name).name == name
    assert parse_name("gsd+mc-sjd+zipar") == DecodingName("mc-sjd", rule="gsd", zipar=True)
    assert parse_name("above+lookup+mc-sjd").drafters == ("above", "lookup")  # drafters keep their order: the first wins


@pytest.mark.parametrize("name, steps", [("lpd-20", 20), ("lpd-32", 32), ("LPD-24", 24)])
def test_lpd_names_parse_to_an_lpd_decoding(name, steps):
    assert parse_name(name) == DecodingName("lpd", steps=steps)
    config = parse_decoding(name, window=8, init="above")  # Jacobi's parameters do not apply to LPD
    assert config == LPDDecoding(steps) and config.describe() == f"lpd-{steps}" and config.exact
    assert LPDDecoding.from_name(name) == config == as_lpd_decoding(config)


def test_plain_ar_is_lpds_one_cell_per_forward_and_other_methods_are_refused():
    assert LPDDecoding.from_name("ar") == as_lpd_decoding(DecodingConfig.from_name("ar")) == LPDDecoding(None)
    for refused in ("mc-sjd", DecodingConfig.from_name("zipar"), "prompt-lookup"):
        with pytest.raises(ValueError, match=r"an LPD pipeline decodes group by group: choose lpd-<steps> \(lpd-20, lpd-32\) or ar"):
            as_lpd_decoding(refused)


def test_the_mesh_drafter_parses_only_where_the_mesh_pipeline_supplies_it():
    from mmspec.pipelines.mesh import FACE_LOOKUP, mesh_decoding

    assert parse_name("mc-sjd+face-lookup").drafters == ("face-lookup",)
    config = DecodingConfig.from_name("mc-sjd+face-lookup", drafters={"face-lookup": FACE_LOOKUP})
    assert config.init is FACE_LOOKUP and mesh_decoding("FACE-LOOKUP+mc-sjd") == config
    assert mesh_decoding("face-lookup", window=8) == DecodingConfig(method="sjd", window=8, init=FACE_LOOKUP)
    assert mesh_decoding("lookup+mc-sjd") == DecodingConfig(method="mc-sjd", init="lookup")
    assert mesh_decoding("SJD", window=4) == DecodingConfig(method="sjd", window=4) == mesh_decoding("sjd+random", window=4)
    with pytest.raises(ValueError, match="the face-lookup drafter is for meshes"):
        DecodingConfig.from_name("mc-sjd+face-lookup")
    with pytest.raises(ValueError, match="face-lookup drafts alone"):
        mesh_decoding("mc-sjd+lookup+face-lookup")
    for name in ("lpd-20", "prompt-lookup", "mc-sjd+above", "zipar+mc-sjd", "auto+gsd", "warp"):
        with pytest.raises(ValueError, match=r"unknown mesh decoding .*; use auto, ar, keyed, sjd or mc-sjd"):
            mesh_decoding(name)


@pytest.mark.parametrize("name, message", [
    ("fast", r"unknown decoding 'fast'; choose from ar, sjd, sjd\+lantern"),
    ("", r"unknown decoding ''; choose from ar"),
    (3, r"unknown decoding 3; choose from ar"),
    ("ar+lookup", r"unknown decoding 'ar\+lookup'"),
    ("sjd+sjd", r"unknown decoding 'sjd\+sjd'"),
    ("mc-sjd+prompt-lookup", r"unknown decoding 'mc-sjd\+prompt-lookup'"),
    ("gsd+lpd-20", r"unknown decoding 'gsd\+lpd-20'"),
    ("lpd-20+gsd", r"unknown decoding 'lpd-20\+gsd': LPD's decoding is lpd-<steps>"),
    ("lpd-0", r"unknown decoding 'lpd-0': LPD's decoding is lpd-<steps>, a whole number of forwards >= 1"),
    ("lpd-x", r"unknown decoding 'lpd-x': LPD's decoding is lpd-<steps>"),
    ("lpd", r"unknown decoding 'lpd'; choose from"),
])
def test_bad_names_are_one_line_errors_naming_what_is_wrong(name, message):
    for parse in (parse_name, parse_decoding, DecodingConfig.from_name, as_decoding):
        with pytest.raises(ValueError, match=message) as err:
            parse(name)
        assert "\n" not in str(err.value)


def test_the_unknown_name_error_lists_every_kind_of_name():
    with pytest.raises(ValueError) as err:
        parse_name("warp")
    text = str(err.value)
    for part in ("zipar+mc-sjd+gsd", "lookup", "face-lookup for meshes", "prompt-lookup", "lpd-<steps>", "lpd-20, lpd-32"):
        assert part in text


def test_lpd_names_are_refused_where_a_model_decodes_token_by_token():
    for refuse in (DecodingConfig.from_name, as_decoding):
        with pytest.raises(ValueError, match=r"lpd-20 is LPD's group-by-group decoding, for an LPD model \(LPDPipeline\)"):
            refuse("lpd-20")
    with pytest.raises(ValueError, match="lpd-32 is LPD's group-by-group decoding"):
        as_decoding(LPDDecoding(32))


# --- LPD behind generate ------------------------------------------------------------------


@pytest.fixture(scope="module")
def lpd_model():
    from mmspec.models.networks.lpd import LPD, LPDConfig

    torch.manual_seed(0)
    return LPD(LPDConfig(img_size=64, vqgan_stride=4, decoder_embed_dim=32, decoder_depth=1, decoder_num_heads=2,
                         class_num=10, vqgan_vocab_size=512)).eval()


SAMPLING = SamplingConfig(guidance_scale=3.0)


@pytest.mark.parametrize("decoding, steps", [("lpd-20", 20), ("lpd-32", 32), (LPDDecoding(32, repulsion=2), 32), ("ar", 256)])
def test_lpd_names_go_through_generate(lpd_model, decoding, steps):
    labels = torch.tensor([0, 3])
    tokens, stats = generate(lpd_model, labels, decoding, SAMPLING, torch.Generator().manual_seed(0))
    repulsion = getattr(decoding, "repulsion", None) or 1
    order = LocalityOrder.for_steps(steps, 16, repulsion=repulsion)
    out = generate_lpd(lpd_model, labels, order, SAMPLING, torch.Generator().manual_seed(0))
    assert torch.equal(tokens, out.tokens) and tokens.shape == (2, 256)
    assert stats.method == ("ar" if steps == 256 else f"lpd-{steps}") and stats.exact
    assert stats.forward_passes == steps and stats.tokens_committed == 512 and stats.lengths.tolist() == [256, 256]
    assert torch.equal(stats.commit_iteration, out.step_of_cell)
    assert stats.forward_passes_per_sample.tolist() == [steps, steps]


def test_generate_on_an_lpd_model_reports_each_forward_and_takes_its_guidance_schedule(lpd_model):
    seen = []
    g = lambda: torch.Generator().manual_seed(1)  # noqa: E731
    linear, _ = generate(lpd_model, torch.tensor([2]), "lpd-20", SAMPLING, g(), on_step=lambda done, total: seen.append((done, total)))
    assert len(seen) == 20 and seen[-1] == (256, 256)
    constant, _ = generate(lpd_model, torch.tensor([2]), "lpd-20", SAMPLING, g(), guidance_schedule="constant")
    order = LocalityOrder.for_steps(20, 16)
    assert torch.equal(constant, generate_lpd(lpd_model, torch.tensor([2]), order, SAMPLING, g(), guidance_schedule="constant").tokens)
    assert not torch.equal(linear, constant)


@pytest.mark.parametrize("decoding, kwargs, message", [
    ("mc-sjd", {}, "an LPD model decodes group by group: choose lpd-<steps>"),
    ("zipar", {}, "an LPD model decodes group by group"),
    ("lpd-20", dict(stop_tokens=[1]), "generate takes no stop_tokens for it"),
    ("lpd-20", dict(max_length=8, processors=[object()]), "generate takes no max_length, processors for it"),
    ("lpd-20", dict(guidance_schedule="cosine"), "unknown guidance schedule 'cosine'"),
    ("lpd-24", {}, "no group-size table for 24 steps on a 16x16 grid"),
])
def test_generate_refuses_what_an_lpd_model_cannot_do_in_one_line(lpd_model, decoding, kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        generate(lpd_model, torch.tensor([0]), decoding, SAMPLING, **kwargs)
    assert "\n" not in str(err.value)


def test_generate_refuses_lpd_on_a_token_model():
    from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT

    model = LlamaGenGPT(LlamaGenConfig(dim=32, n_layer=1, n_head=2, vocab_size=16, block_size=4, num_classes=2)).eval()
    with pytest.raises(ValueError, match="lpd-20 is LPD's group-by-group decoding"):
        generate(model, torch.tensor([0]), "lpd-20")
    with pytest.raises(ValueError, match="guidance_schedule is LPD's"):
        generate(model, torch.tensor([0]), "ar", guidance_schedule="linear")


def test_the_lpd_pipeline_decodes_through_generate(lpd_model):
    from mmspec.assets import DEFAULT_ASSETS
    from mmspec.pipelines import load_pipeline
    from mmspec.pipelines.lpd import LPDPipeline

    raster = load_pipeline(DEFAULT_ASSETS)
    pipe = LPDPipeline(lpd_model, raster.vqvae, class_names=raster.class_names, default_sampling={"guidance_scale": 3.0})
    assert pipe.check_decoding("LPD-32") == LPDDecoding(32)
    out = pipe([1, 4], decoding="lpd-20", generator=torch.Generator().manual_seed(2), output_type="tokens")
    tokens, stats = generate(lpd_model, torch.tensor([1, 4]), "lpd-20", SAMPLING, torch.Generator().manual_seed(2))
    assert torch.equal(out.tokens, tokens)
    assert [(s.method, s.forward_passes) for s in out.stats] == [("lpd-20", 20)] * 2
    assert all(torch.equal(s.commit_iteration, c[None]) for s, c in zip(out.stats, stats.commit_iteration))


# --- every place uses the one parser ------------------------------------------------------


def test_the_text_places_take_any_spelling_of_a_text_name():
    """The caption whitelist took "mc-sjd+lookup" but not "lookup+mc-sjd"; parsed, both are one config."""
    from mmspec.pipelines.captioning import TEXT_DECODINGS, caption_decoding
    from mmspec.pipelines.text import check_text_decoding

    for name in TEXT_DECODINGS:
        assert caption_decoding(name) == check_text_decoding(name) == DecodingConfig.from_name(name)
    assert caption_decoding("LOOKUP+MC-SJD") == DecodingConfig.from_name("mc-sjd+lookup")
    with pytest.raises(ValueError, match=r"unknown decoding 'zipar\+mc-sjd' for text \(.*text is one line.*\); choose from auto"):
        caption_decoding("zipar+mc-sjd")
    with pytest.raises(ValueError, match=r"unknown decoding 'lpd-20' for text; choose from auto, ar"):
        caption_decoding("lpd-20")


def cli_args(**given) -> Namespace:
    flags = dict(command="generate", decoding=None, methods=None, window=None, zipar_window=8, init=None, branches=None,
                 step_test="per-token", cost="cached")
    return Namespace(**{**flags, **given})


def test_the_cli_parses_every_name_with_the_one_parser():
    from mmspec.commands.common import decoding_configs

    assert decoding_configs(cli_args(decoding="LPD-32")) == [LPDDecoding(32)]
    assert decoding_configs(cli_args(decoding="gsd+mc-sjd", window=8)) == [DecodingConfig.from_name("mc-sjd+gsd", window=8)]
    bench = decoding_configs(cli_args(command="bench", methods=["ar", "lpd-20", "lpd-32"]))
    assert bench == [DecodingConfig.from_name("ar"), LPDDecoding(20), LPDDecoding(32)]
    with pytest.raises(ValueError, match="unknown decoding 'lpd-twenty'"):
        decoding_configs(cli_args(decoding="lpd-twenty"))


# what string matching on a decoding name looked like in the places that now parse it
STRING_MATCHING = [
    re.compile(r"""startswith\(\s*["'](lpd|auto|zipar|mc-sjd|sjd)"""),
    re.compile(r"\bin TEXT_DECODINGS\b"),
    re.compile(r"""decoding\s+in\s+\(\s*["']"""),
    re.compile(r"""decoding(\.lower\(\))?\.(split|partition)\(\s*["'][+-]"""),
    re.compile(r"""name\.partition\(\s*["']-"""),
]


def test_no_place_matches_decoding_names_as_strings():
    places = [p for p in (ROOT / "mmspec").rglob("*.py") if p.name != "names.py"]
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in places for pattern in STRING_MATCHING
             for m in pattern.finditer(p.read_text())]
    assert not found, f"parse decoding names with mmspec.decoding.names, not by string matching: {found}"
