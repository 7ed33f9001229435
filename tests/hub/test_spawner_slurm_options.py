"""The spawn page's Slurm options of DetSpawner (a hub server's time limit, memory, partition
and QOS, as batchspawner's form offers): Slurm's time and memory formats, the admin's settings
checked, the form's fields, what the form data and the hub's REST API give checked strictly,
and the sbatch options the choices become. A server run as a job on the test Slurm with them is
in tests/e2e/test_slurm_hub_options.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from det_hub.spawner import DetSpawner, SpawnError
from det_hub.spawner.slurm_options import (
    SlurmFormSettings,
    SlurmOptionsError,
    memory_mib,
    sbatch_args,
    time_seconds,
)


@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 1800), ("1", 60), ("90", 5400), ("30:15", 1815), ("1:00:00", 3600),
    ("100:00:00", 360000), ("2-0", 172800), ("2-12", 216000), ("2-12:30", 217800),
    ("1-00:00:00", 86400), ("0-0:0:1", 1), (" 45 ", 2700),
])
def test_slurms_time_formats_are_read(text: str, seconds: int) -> None:
    assert time_seconds(text) == seconds


@pytest.mark.parametrize(("text", "message"), [
    ("", "is not a time limit"), ("1h", "is not a time limit"), ("1.5", "is not a time limit"),
    ("-5", "is not a time limit"), ("UNLIMITED", "is not a time limit"),
    ("1:2:3:4", "is not a time limit"), ("1:00:000", "is not a time limit"),
    ("1-", "is not a time limit"), ("1:60:00", "less than 60"), ("1:00:60", "less than 60"),
    ("10:75", "less than 60"), ("1-24:00:00", "less than 24"), ("0", "longer than 0"),
    ("0:00:00", "longer than 0"), ("0-0", "longer than 0"),
])
def test_a_wrong_time_limit_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        time_seconds(text)


@pytest.mark.parametrize(("text", "mib"), [
    ("512M", 512), ("512m", 512), ("4G", 4096), ("4g", 4096), ("2048", 2048),
    ("1T", 1024 * 1024), ("1024K", 1), ("512k", 0.5),
])
def test_slurms_memory_sizes_are_read(text: str, mib: float) -> None:
    assert memory_mib(text) == mib


@pytest.mark.parametrize("text", ["4GB", "G", "1.5G", "-1G", "4 G", "4Gi", "lots", ""])
def test_a_wrong_memory_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a memory size: give a size such as 512M"):
        memory_mib(text)


def test_no_memory_at_all_is_refused() -> None:
    # --mem=0 asks Slurm for all of a node's memory: never what a form's user meant.
    with pytest.raises(ValueError, match="more than 0"):
        memory_mib("0G")


SETTINGS = SlurmFormSettings(("time", "mem", "partition", "qos"), time_default="1:00:00",
                             time_max="8:00:00", mem_default="2g", mem_max="16G",
                             partitions=("debug", "long"), qos=("normal", "high"))


def test_the_admins_settings_are_checked_naming_each_setting() -> None:
    assert SETTINGS.problems() == []
    bad = SlurmFormSettings(("time", "gpus", "partition"), time_default="9:00:00",
                            time_max="8:00:00", mem_default="4GB", mem_max="0",
                            qos=("no qos",))
    assert bad.problems() == [
        "DetSpawner.slurm_form_fields: 'gpus' is not one of time, mem, partition, qos",
        "DetSpawner.slurm_time_default: '9:00:00' is more than slurm_time_max '8:00:00'",
        "DetSpawner.slurm_mem_default: '4GB' is not a memory size: give a size such as 512M "
        "or 4G (units K, M, G, T; M when none)",
        "DetSpawner.slurm_mem_max: '0': memory must be more than 0 (0 asks for a whole "
        "node's)",
        "DetSpawner.slurm_form_fields offers 'partition', but DetSpawner.slurm_partitions "
        "lists none to choose from",
        "DetSpawner.slurm_qos_choices: 'no qos' is not a Slurm name",
    ]
    with pytest.raises(SlurmOptionsError, match="the spawn page's Slurm options are set up "
                                                "wrongly: DetSpawner.slurm_form_fields"):
        bad.form_html()
    with pytest.raises(SlurmOptionsError, match="set up wrongly"):
        bad.choose({"time": "30"})


def test_the_form_shows_the_offered_fields_with_their_defaults_and_limits() -> None:
    assert SlurmFormSettings().form_html() == ""
    page = SETTINGS.form_html()
    assert re.findall(r'name="(slurm_\w+)"', page) == [
        "slurm_time", "slurm_mem", "slurm_partition", "slurm_qos"]
    assert 'placeholder="1:00:00"' in page and "at most 8:00:00" in page
    assert 'placeholder="2g"' in page and "at most 16G" in page
    assert re.findall(r'<option value="(\w*)">', page) == [
        "", "debug", "long", "", "normal", "high"]
    only_time = SlurmFormSettings(("time",)).form_html()
    assert re.findall(r'name="(slurm_\w+)"', only_time) == ["slurm_time"]
    assert 'placeholder="the pool&#x27;s own"' in only_time and "at most" not in only_time


def test_choices_are_checked_against_the_settings() -> None:
    assert SETTINGS.choose({"time": " 0-6 ", "mem": "512m", "partition": "long",
                            "qos": "high"}) == {
        "time": "0-6", "mem": "512M", "partition": "long", "qos": "high"}
    assert SETTINGS.choose({"time": "7:59:59", "mem": "16g"}) == {"time": "7:59:59",
                                                                   "mem": "16G"}
    assert SETTINGS.choose(None) == {} and SETTINGS.choose({}) == {}
    with pytest.raises(SlurmOptionsError) as refused:
        SETTINGS.choose({"time": "8:00:01", "mem": "4GB", "partition": "gpu", "qos": ""})
    assert str(refused.value) == (
        "Time limit: '8:00:01' is more than the 8:00:00 this hub allows; "
        "Memory: '4GB' is not a memory size: give a size such as 512M or 4G (units K, M, G, "
        "T; M when none); "
        "Partition: 'gpu' is not offered; choose one of debug, long; "
        "QOS: must be a non-empty text; got ''")
    with pytest.raises(SlurmOptionsError, match="Memory: '32G' is more than the 16G"):
        SETTINGS.choose({"mem": "32G"})
    only_time = SlurmFormSettings(("time",))
    with pytest.raises(SlurmOptionsError, match=r"Memory: not an option this hub offers \(it "
                                                r"offers: time\)"):
        only_time.choose({"mem": "1G"})
    with pytest.raises(SlurmOptionsError, match="must be a mapping"):
        only_time.choose(["30"])
    with pytest.raises(SlurmOptionsError, match="Time limit: must be a non-empty text; got 30"):
        only_time.choose({"time": 30})


def test_choices_become_sbatch_options_over_the_defaults() -> None:
    chosen = SETTINGS.choose({"time": "0-4", "qos": "high"})
    assert sbatch_args(SETTINGS.with_defaults(chosen)) == [
        "--time=0-4", "--mem=2G", "--qos=high"]
    assert sbatch_args(SETTINGS.with_defaults({})) == ["--time=1:00:00", "--mem=2G"]
    assert sbatch_args(SlurmFormSettings(("time",)).with_defaults({})) == []


def spawner(**settings: Any) -> DetSpawner:
    return DetSpawner(slurm_form_fields=["time", "mem", "partition"], slurm_time_max="4:00:00",
                      slurm_mem_default="1G", slurm_partitions=["debug"], **settings)


def test_detspawners_form_and_form_data() -> None:
    plain = DetSpawner()
    assert plain.options_form == "", "no spawn page where there is nothing to choose"
    assert plain.options_from_form({}) == {"profile": 0}
    profiles = [{"display_name": "On Slurm", "resource_pool": "hpc"}]
    form = spawner(profiles=profiles).options_form
    assert isinstance(form, str)
    assert re.findall(r'name="(\w+)"', form) == [
        "profile", "slurm_time", "slurm_mem", "slurm_partition"]
    assert re.findall(r'name="(\w+)"', str(spawner().options_form)) == [
        "slurm_time", "slurm_mem", "slurm_partition"]

    s = spawner()
    assert s.options_from_form({"slurm_time": ["1:30:00"], "slurm_mem": ["512m"],
                                "slurm_partition": [""]}) == {
        "profile": 0, "slurm": {"time": "1:30:00", "mem": "512M"}}
    assert s.options_from_form({"slurm_time": [""], "slurm_mem": [""]}) == {"profile": 0}
    # What the hub shows on the spawn page when the form data is refused: the message.
    with pytest.raises(SlurmOptionsError) as refused:
        s.options_from_form({"slurm_time": ["5:00:00"], "slurm_partition": ["gpu"]})
    assert str(refused.value) == ("Time limit: '5:00:00' is more than the 4:00:00 this hub "
                                  "allows; Partition: 'gpu' is not offered; choose one of "
                                  "debug")


def test_options_given_through_the_hubs_api_are_checked_too() -> None:
    s = spawner()
    s.user_options = {"slurm": {"time": "2:00:00", "partition": "debug"}}
    assert s._slurm_choices() == {"time": "2:00:00", "partition": "debug"}
    s.user_options = {}
    assert s._slurm_choices() == {}
    for options, message in (
            ({"slurm": {"time": "1 day"}}, "Time limit: '1 day' is not a time limit"),
            ({"slurm": {"qos": "high"}}, "QOS: not an option this hub offers"),
            ({"slurm": "4G"}, "Slurm options must be a mapping of time, mem, partition, qos")):
        s.user_options = options
        with pytest.raises(SpawnError, match="the server's Slurm options: " + message) as e:
            s._slurm_choices()
        assert e.value.jupyterhub_message == str(e.value)
