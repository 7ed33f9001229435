"""`--config KEY=VALUE` and `--config-file`: what they change in a config."""

from __future__ import annotations

import pytest

from det_hub.config import ConfigError, merge_config, overrides_from, parse_override


@pytest.mark.parametrize(("text", "expected"), [
    ("max_restarts=2", {"max_restarts": 2}),
    ("searcher.max_length.batches=500", {"searcher": {"max_length": {"batches": 500}}}),
    ("name=my run", {"name": "my run"}),
    ("environment.environment_variables=['A=1', 'B=2']",
     {"environment": {"environment_variables": ["A=1", "B=2"]}}),
    ("searcher.max_length={epochs: 2}", {"searcher": {"max_length": {"epochs": 2}}}),
    ("description=", {"description": None}),
    ("hyperparameters.lr=1e-3", {"hyperparameters": {"lr": 1e-3}}),
])
def test_an_override_is_a_dotted_key_and_a_yaml_value(text: str, expected: dict) -> None:
    assert parse_override(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("max_restarts", "expected KEY=VALUE"),
    ("=3", "expected KEY=VALUE"),
    ("searcher..name=x", "empty part in the key"),
    ("a={b: 1", "the value is not YAML"),
])
def test_unreadable_overrides_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_override(text)


def test_mappings_merge_and_everything_else_replaces() -> None:
    base = {"searcher": {"name": "single", "max_length": {"batches": 10}},
            "bind_mounts": [{"host_path": "/a"}], "max_restarts": 5}
    merged = merge_config(base, {"searcher": {"max_length": {"batches": 20}}},
                          {"bind_mounts": [], "max_restarts": None})
    assert merged == {"searcher": {"name": "single", "max_length": {"batches": 20}},
                      "bind_mounts": [], "max_restarts": None}
    assert base["searcher"]["max_length"] == {"batches": 10}  # not modified
    # A change that is a mapping where the base has a scalar replaces it, and the other way.
    assert merge_config({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}
    assert merge_config({"a": {"b": 2}}, {"a": 3}) == {"a": 3}


def test_the_file_comes_first_and_later_overrides_win() -> None:
    file_text = "searcher:\n  max_length: {batches: 100}\nmax_restarts: 1\n"
    got = overrides_from(["max_restarts=2", "max_restarts=3", "name=x"], file_text)
    assert got == {"searcher": {"max_length": {"batches": 100}}, "max_restarts": 3, "name": "x"}
    assert overrides_from([], "") == {}
    with pytest.raises(ConfigError, match="must be a mapping"):
        overrides_from([], "- a\n- b\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        overrides_from([], "a: [1\n")
