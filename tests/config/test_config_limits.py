"""Configs read from YAML under limits: alias bombs, deep nesting and huge configs are refused
with a message naming the limit, its value and its setting; ordinary configs, large ones
included, read as ``yaml.safe_load`` reads them."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from traitlets import TraitError

from det_hub.config import (
    ConfigError,
    ConfigLimitError,
    ConfigLimits,
    limited_yaml,
    load_yaml,
    overrides_from,
    parse_command_config,
    parse_experiment_config,
    parse_override,
    parse_task_config,
)
from det_hub.config.limited_yaml import check_depth
from det_hub.service.app import MasterApp

EXPERIMENT = ("name: limits\nentrypoint: python3 train.py\n"
              "searcher: {name: single, metric: loss, max_length: {batches: 1}}\n")


@pytest.fixture(params=["libyaml", "pyyaml"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every rule holds with libyaml's parser and with PyYAML's own."""
    if request.param == "libyaml":
        if not yaml.__with_libyaml__:
            pytest.skip("PyYAML is built without libyaml here")
        assert limited_yaml._FAST_LOADER is not limited_yaml._PyLoader
    else:
        monkeypatch.setattr(limited_yaml, "_FAST_LOADER", limited_yaml._PyLoader)
    yield request.param


def billion_laughs(levels: int = 9) -> str:
    """The classic alias bomb: each level a list of nine aliases of the one before, about 400
    bytes that expand to 9^levels strings."""
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    names = "abcdefghijklmnop"
    for i in range(1, levels):
        refs = ", ".join([f"*{names[i - 1]}"] * 9)
        lines.append(f"{names[i]}: &{names[i]} [{refs}]")
    return "\n".join(lines) + "\n"


DEFAULTS = ConfigLimits()


def refusal(text: str, limits: ConfigLimits = DEFAULTS) -> ConfigLimitError:
    with pytest.raises(ConfigLimitError) as info:
        load_yaml(text, limits)
    return info.value


# --- aliases ----------------------------------------------------------------------------------

def test_the_billion_laughs_is_refused_before_it_expands(parser: str) -> None:
    bomb = billion_laughs()
    assert 350 < len(bomb) < 600
    err = refusal(bomb)
    assert err.limit == "max_alias_factor" and not err.too_large
    assert str(err).startswith("the config's aliases expand it to more than 10 times the "
                               "nodes written (at line ")
    assert str(err).endswith("the limit is 10 times (ConfigLimits.max_alias_factor)")
    # Refused within the first few levels: the rule looks ahead at what the text could hold.
    line = int(str(err).split("at line ")[1].split(",")[0])
    assert line <= 4


def test_the_bomb_is_refused_by_every_parser_of_user_configs() -> None:
    bomb = EXPERIMENT + "hyperparameters:\n" + "".join(
        "  " + line + "\n" for line in billion_laughs().splitlines())
    for parse in (parse_experiment_config, parse_command_config, parse_task_config):
        with pytest.raises(ConfigLimitError, match="max_alias_factor"):
            parse(bomb)
    with pytest.raises(ConfigLimitError, match="max_alias_factor"):
        overrides_from([], bomb)
    flow = "{" + ", ".join(f"{k}: {v}" for k, v in (
        line.split(": ", 1) for line in billion_laughs().splitlines())) + "}"
    with pytest.raises(ConfigLimitError, match="max_alias_factor"):
        parse_override("hyperparameters=" + flow)


def test_reused_sections_within_the_factor_are_read_as_safe_load_reads_them(
        parser: str) -> None:
    text = EXPERIMENT + ("environment: &env {environment_variables: [A=1, B=2]}\n"
                         "data: {train: &d {path: /data, shuffle: true}, test: *d, more: *d}\n")
    assert load_yaml(text) == yaml.safe_load(text)
    config = parse_experiment_config(text)
    assert config.data == {"train": {"path": "/data", "shuffle": True},
                           "test": {"path": "/data", "shuffle": True},
                           "more": {"path": "/data", "shuffle": True}}


def test_the_alias_factor_is_the_limit_given(parser: str) -> None:
    # Written: the mapping, 3 keys, the list and its 4 items, 2 aliases: 11 nodes.
    # Expanded: the mapping, 3 keys, the list (5 nodes) three times: 19 nodes.
    text = "a: &x [1, 2, 3, 4]\nb: *x\nc: *x\n"
    assert load_yaml(text, ConfigLimits(max_alias_factor=2)) == {
        "a": [1, 2, 3, 4], "b": [1, 2, 3, 4], "c": [1, 2, 3, 4]}
    err = refusal(text, ConfigLimits(max_alias_factor=1,
                                     settings={"max_alias_factor": "X.factor"}))
    assert err.limit == "max_alias_factor"
    assert "more than 1 times the nodes written" in str(err)
    assert str(err).endswith("the limit is 1 times (X.factor)")
    # Merge keys are aliases too.
    merged = "base: &b {x: 1, y: 2, z: 3}\none: {<<: *b, w: 4}\n"
    assert load_yaml(merged)["one"] == {"x": 1, "y": 2, "z": 3, "w": 4}


def test_an_alias_inside_its_own_anchor_is_refused(parser: str) -> None:
    err = refusal("a: &a [1, *a]\n")
    assert "alias *a inside the node it refers to" in str(err)
    assert err.limit == "max_alias_factor"


def test_an_undefined_alias_stays_a_yaml_error(parser: str) -> None:
    with pytest.raises(yaml.YAMLError, match="undefined alias"):
        load_yaml("a: *nowhere\n")


# --- nesting ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "[" * 10_000 + "]" * 10_000,
    "[" * 10_000,  # not even closed
    '{"a": ' * 10_000 + "1" + "}" * 10_000,  # JSON is YAML
    "x:\n" + "".join("  " * i + "- \n" for i in range(1, 300)),
    "".join("  " * i + f"k{i}:\n" for i in range(200)),
], ids=["flow-lists", "unclosed", "json", "block-lists", "block-mappings"])
def test_deep_nesting_is_refused_not_a_recursion_error(parser: str, text: str) -> None:
    err = refusal(text)
    assert err.limit == "max_depth" and not err.too_large
    assert "nests lists and mappings more than 64 levels deep" in str(err)
    assert str(err).endswith("the limit is 64 levels (ConfigLimits.max_depth)")


def nested(levels: int) -> str:
    return "[" * levels + "1" + "]" * levels


def test_the_depth_limit_is_exact(parser: str) -> None:
    limits = ConfigLimits(max_depth=8)
    value: Any = load_yaml(nested(8), limits)
    for _ in range(7):
        value = value[0]
    assert value == [1]
    assert refusal(nested(9), limits).limit == "max_depth"
    # The top-level mapping is level 1.
    assert load_yaml("a: " + nested(7), limits) == {"a": yaml.safe_load(nested(7))}
    assert refusal("a: " + nested(8), limits).limit == "max_depth"


def test_the_deepest_allowed_config_goes_through_every_step_without_recursion_errors() -> None:
    limits = ConfigLimits(max_depth=limited_yaml.MAX_DEPTH_CEILING)
    # The top-level mapping, data, then lists down to the limit.
    deep = "[" * (limits.max_depth - 2) + "]" * (limits.max_depth - 2)
    text = EXPERIMENT + "data: {x: " + deep + "}\n"
    config = parse_experiment_config(text, limits)
    assert yaml.safe_dump(config.to_dict()).count("x:") == 1
    # An override's value nests below its key's mappings.
    changes = overrides_from([f"data={deep}"], limits=limits)
    assert changes["data"] == yaml.safe_load(deep)
    with pytest.raises(ConfigLimitError, match="more than 200 levels deep"):
        parse_experiment_config(EXPERIMENT + "data: {x: [" + deep + "]}\n", limits)


def test_loaded_data_is_held_to_the_depth_ceiling() -> None:
    """A loaded mapping (a stored config) is validated up to the highest depth a setting
    allows, and refused past it rather than overflowing Python's recursion."""
    data: Any = [1]
    for _ in range(limited_yaml.MAX_DEPTH_CEILING - 3):
        data = [data]
    config = parse_experiment_config(yaml.safe_load(EXPERIMENT) | {"data": {"x": data}},
                                     ConfigLimits(max_depth=8))
    assert config.data["x"] == data
    with pytest.raises(ConfigLimitError, match="more than 200 levels deep"):
        parse_experiment_config(yaml.safe_load(EXPERIMENT) | {"data": {"x": [data]}})
    with pytest.raises(ConfigLimitError, match="more than 200 levels deep"):
        parse_task_config({"environment": {"x": [[data]]}})
    # data itself is 198 levels deep.
    check_depth(data, ConfigLimits(max_depth=198))
    with pytest.raises(ConfigLimitError, match="more than 197 levels deep"):
        check_depth(data, ConfigLimits(max_depth=197))
    # Shared and cyclic structures end.
    shared = [1]
    cyclic: list[Any] = [shared, shared]
    cyclic.append(cyclic)
    check_depth(cyclic, ConfigLimits(max_depth=3))


# --- size -------------------------------------------------------------------------------------

def test_text_over_the_size_limit_is_refused_before_it_is_read(parser: str) -> None:
    limits = ConfigLimits(max_bytes=1000)
    err = refusal("x: " + "y" * 998, limits)
    assert err.limit == "max_bytes" and err.too_large
    assert str(err) == ("the config is 1001 bytes, larger than 1000 bytes; the limit is 1000 "
                        "bytes (ConfigLimits.max_bytes)")
    # Bytes, not characters: 600 two-byte characters are 1200 bytes.
    assert str(refusal("é" * 600, limits)).startswith("the config is 1200 bytes, larger")
    assert str(refusal("é" * 1001, limits)).startswith("the config is at least 1001 bytes")
    assert load_yaml(b"x: " + b"y" * 997, limits) == {"x": "y" * 997}
    # Without aliases the size read is never more than the text's.
    assert len(load_yaml("[" + "'',  " * 199 + "'']", limits)) == 200


def test_a_config_that_aliases_expand_past_the_size_limit_is_refused(parser: str) -> None:
    # The keys (2 characters) and five copies of the string (1500): 1502 characters.
    text = "a: &s " + "z" * 300 + "\nb: [*s, *s, *s, *s]\n"
    assert len(text) < 400
    err = refusal(text, ConfigLimits(max_bytes=1501))
    assert err.limit == "max_bytes" and err.too_large
    assert "larger than 1501 bytes once its aliases are expanded" in str(err)
    assert len(load_yaml(text, ConfigLimits(max_bytes=1502))["b"]) == 4


def test_a_large_legal_config_is_read_whole() -> None:
    values = ", ".join(str(i) for i in range(130_000))
    text = EXPERIMENT + ("hyperparameters:\n  x: {type: categorical, vals: [" + values + "]}\n"
                         "description: " + "d" * 10_000 + "\n")
    assert 900_000 < len(text) < DEFAULTS.max_bytes
    config = parse_experiment_config(text)
    assert config.to_dict()["hyperparameters"]["x"]["vals"][-1] == 129_999
    assert config.description == "d" * 10_000


def test_a_plain_config_reads_as_safe_load_reads_it(parser: str) -> None:
    text = EXPERIMENT + "hyperparameters:\n" + "".join(
        f"  h{i}: {{type: int, minval: {i}, maxval: {i + 10}}}\n" for i in range(2000))
    assert load_yaml(text) == yaml.safe_load(text)


def test_a_config_the_master_took_reads_again_once_written_out() -> None:
    """The parsers' default limits (for a user's own file, or one the master writes for a
    task) bound no size: a config taken at the master's size limit is larger written out in
    block style, and must still read."""
    values = ", ".join(str(i) for i in range(100_000))
    text = EXPERIMENT + "hyperparameters:\n  x: {type: categorical, vals: [" + values + "]}\n"
    config = parse_experiment_config(text, DEFAULTS)
    written = yaml.safe_dump(config.to_dict())
    assert len(written) > DEFAULTS.max_bytes > len(text)
    assert parse_experiment_config(written) == config
    assert limited_yaml.LOCAL_LIMITS.max_alias_factor == DEFAULTS.max_alias_factor


# --- the same as yaml.safe_load otherwise ---------------------------------------------------------

json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=30)


@settings(max_examples=150, deadline=None)
@given(json_like)
def test_values_within_the_limits_read_as_safe_load_reads_them(value: Any) -> None:
    for text in (yaml.safe_dump(value), yaml.safe_dump(value, default_flow_style=True)):
        assert load_yaml(text) == yaml.safe_load(text)


def test_errors_other_than_limits_are_unchanged() -> None:
    with pytest.raises(ConfigError) as info:
        parse_experiment_config("a: [1, 2")
    assert str(info.value) == ("invalid YAML at line 1, column 9: expected ',' or ']', but "
                               "got '<stream end>'")
    with pytest.raises(ConfigError, match="the value is not YAML"):
        parse_override("a=[1, 2")


def test_a_limit_error_survives_pickling() -> None:
    err = refusal(billion_laughs())
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, ConfigLimitError)
    assert (str(again), again.limit, again.too_large) == (str(err), err.limit, err.too_large)


# --- settings ---------------------------------------------------------------------------------

def test_the_limits_are_the_master_settings() -> None:
    app = MasterApp(config_max_bytes=5000, config_max_alias_factor=3, config_max_depth=12)
    limits = app.config_limits()
    assert (limits.max_bytes, limits.max_alias_factor, limits.max_depth) == (5000, 3, 12)
    assert "(MasterApp.config_max_depth)" in str(refusal(nested(13), limits))
    assert str(refusal("x" * 5001, limits)).endswith(
        "the limit is 5000 bytes (MasterApp.config_max_bytes)")
    # Written: 21 nodes; expanded: 85.
    assert "the limit is 3 times (MasterApp.config_max_alias_factor)" in str(
        refusal("a: &a [1, 2, 3, 4, 5, 6, 7, 8]\nb: [" + ", ".join(["*a"] * 8) + "]\n",
                limits))
    defaults = MasterApp().config_limits()
    assert defaults == ConfigLimits()
    with pytest.raises(TraitError):
        MasterApp(config_max_depth=limited_yaml.MAX_DEPTH_CEILING + 1)
    with pytest.raises(ValueError, match="max_depth must be at most 200"):
        ConfigLimits(max_depth=201)
    with pytest.raises(ValueError, match="max_bytes must be a positive integer"):
        ConfigLimits(max_bytes=0)
