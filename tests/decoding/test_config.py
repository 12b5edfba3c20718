import pytest

from mmspec.decoding.config import DECODINGS, DecodingConfig
from mmspec.core.rules import GSDRule, LanternRule


def test_every_listed_name_round_trips():
    for name in DECODINGS:
        assert DecodingConfig.from_name(name).name == name


def test_parts_may_come_in_any_order():
    config = DecodingConfig.from_name("gsd+mc-sjd+zipar", zipar_window=4)
    assert config.name == "zipar+mc-sjd+gsd" and config.zipar_window == 4 and isinstance(config.rule, GSDRule)


def test_lantern_lambda_form():
    rule = DecodingConfig.from_name("sjd+lantern", lantern_lambda=5.0, lantern_k=10).rule
    assert isinstance(rule, LanternRule) and rule.lam == 5.0 and rule.delta is None


def test_drafter_names_join_a_decoding_name():
    config = DecodingConfig.from_name("mc-sjd+lookup+above")
    assert (config.method, config.drafter.name) == ("mc-sjd", "lookup+above")
    lookup = DecodingConfig.from_name("lookup")  # a drafter alone drafts for SJD
    assert (lookup.method, lookup.drafter.name, lookup.exact) == ("sjd", "lookup", True)
    assert not DecodingConfig.from_name("zipar+mc-sjd+above").exact


def test_exactness_is_declared():
    assert DecodingConfig.from_name("mc-sjd").exact
    assert DecodingConfig.from_name("sjd").exact
    assert not DecodingConfig.from_name("sjd+lantern").exact
    assert not DecodingConfig.from_name("zipar+mc-sjd").exact


@pytest.mark.parametrize("name", ["fast", "ar+sjd", "lantern", "gsd+lantern+sjd", "sjd+mc-sjd", "sjd+sjd", "ar+gsd", "", "ar+lookup",
                                  "mc-sjd+lookup+lookup"])
def test_unknown_or_contradictory_names_list_the_valid_ones(name):
    with pytest.raises(ValueError, match=r"unknown decoding .*; choose from ar, sjd, sjd\+lantern, sjd\+gsd, sjd\+pcg, mc-sjd"):
        DecodingConfig.from_name(name)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(window=0), "window must be an integer >= 1"),
        (dict(init="diagonal"), "unknown draft init 'diagonal'"),
        (dict(zipar_window=0), "zipar_window must be an integer >= 1"),
        (dict(method="ar", rule=GSDRule()), "gsd is an acceptance rule for Jacobi drafts"),
    ],
)
def test_bad_parameters_are_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DecodingConfig(**kwargs)
