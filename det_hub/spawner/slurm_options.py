"""The spawn page's Slurm options: a hub server's time limit, memory, partition and QOS.

Where DetSpawner runs servers as Slurm jobs, the admin may let users set some of their job's
``sbatch`` options on the spawn page, as JupyterHub's batchspawner does, within limits and from
lists the admin gives (:class:`SlurmFormSettings`, from DetSpawner's ``slurm_*`` settings).
What a user chooses is checked here, strictly, before anything is asked of the master: a time
limit in one of Slurm's formats, a memory size, a partition or QOS of the admin's lists. The
choices become the job's ``sbatch`` options (:func:`sbatch_args`), which the spawner sends as the
task config's ``slurm.sbatch_args``.

Pure: no I/O, so the form and its checks are tested without a hub.
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

#: The options the spawn page may offer, in the order it shows them.
FIELDS = ("time", "mem", "partition", "qos")
#: Each option's ``sbatch`` flag and its label on the page.
FLAGS = {"time": "--time", "mem": "--mem", "partition": "--partition", "qos": "--qos"}
LABELS = {"time": "Time limit", "mem": "Memory", "partition": "Partition", "qos": "QOS"}

# Slurm's time formats (sbatch --time): M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
_TIME = re.compile(r"^(?:(?P<d>\d+)-(?P<dh>\d{1,2})(?::(?P<dm>\d{1,2})(?::(?P<ds>\d{1,2}))?)?"
                   r"|(?P<a>\d+)(?::(?P<b>\d{1,2})(?::(?P<c>\d{1,2}))?)?)$")
_MEMORY = re.compile(r"^(?P<n>\d+)(?P<unit>[KMGTkmgt])?$")
_MIB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
#: What a partition or QOS name may be made of.
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
TIME_FORMATS = "minutes (30), hours:minutes:seconds (1:00:00) or days-hours:minutes:seconds " \
               "(1-00:00:00)"
MEMORY_FORMATS = "a size such as 512M or 4G (units K, M, G, T; M when none)"


class SlurmOptionsError(ValueError):
    """A choice on the spawn page, or a setting behind it, that cannot be used; the message
    names the field (or setting) and what is allowed. JupyterHub shows it on the spawn page."""


def time_seconds(text: str) -> int:
    """Seconds of a Slurm time limit: ``30`` (minutes), ``30:00`` (minutes:seconds),
    ``1:00:00``, ``2-0``, ``2-12:30`` or ``1-00:00:00``.

    Raises:
        ValueError: Not one of those formats, minutes or seconds of 60 and more, hours of 24
            and more after days, or no time at all (0 asks Slurm for no limit).
    """
    match = _TIME.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a time limit: give {TIME_FORMATS}")
    g = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    checked: tuple[int, ...]
    if "d" in g:
        parts = (g["dh"], g.get("dm", 0), g.get("ds", 0))
        if parts[0] >= 24:
            raise ValueError(f"{text!r}: hours after days must be less than 24")
        seconds = g["d"] * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]
        checked = parts[1:]
    elif "c" in g:
        seconds, checked = g["a"] * 3600 + g["b"] * 60 + g["c"], (g["b"], g["c"])
    elif "b" in g:
        seconds, checked = g["a"] * 60 + g["b"], (g["b"],)
    else:
        seconds, checked = g["a"] * 60, ()
    if any(v >= 60 for v in checked):
        raise ValueError(f"{text!r}: minutes and seconds must be less than 60")
    if seconds <= 0:
        raise ValueError(f"{text!r}: a time limit must be longer than 0 (0 asks for none)")
    return seconds


def memory_mib(text: str) -> float:
    """MiB of a Slurm memory size (``512M``, ``4G``, ``1T``, ``2048``: MiB when no unit).

    Raises:
        ValueError: Not a whole number with at most one unit K, M, G or T, or 0 (which asks
            Slurm for all of a node's memory).
    """
    match = _MEMORY.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a memory size: give {MEMORY_FORMATS}")
    mib = int(match.group("n")) * _MIB[(match.group("unit") or "M").upper()]
    if mib <= 0:
        raise ValueError(f"{text!r}: memory must be more than 0 (0 asks for a whole node's)")
    return mib


def _normal(field: str, text: str) -> str:
    """The value as it goes to sbatch: memory with its unit upper-case, times as written."""
    text = text.strip()
    return text.upper() if field == "mem" else text


@dataclasses.dataclass(frozen=True)
class SlurmFormSettings:
    """What the admin lets users choose (DetSpawner's ``slurm_*`` settings).

    Attributes:
        fields: The options the spawn page shows, of :data:`FIELDS`.
        time_default, mem_default: What a server's job gets when its user leaves the field
            empty (or the page does not show it); empty: the pool's own, or Slurm's.
        time_max, mem_max: The most a user may ask for; empty: no limit of det_hub's.
        partitions, qos: The partitions and QOS a user may pick from; the field is empty
            by default: the pool's own.
    """

    fields: tuple[str, ...] = ()
    time_default: str = ""
    time_max: str = ""
    mem_default: str = ""
    mem_max: str = ""
    partitions: tuple[str, ...] = ()
    qos: tuple[str, ...] = ()

    def problems(self) -> list[str]:
        """What is wrong with the settings, each naming the DetSpawner setting."""
        found = [f"DetSpawner.slurm_form_fields: {f!r} is not one of {', '.join(FIELDS)}"
                 for f in self.fields if f not in FIELDS]
        for field, parse in (("time", time_seconds), ("mem", memory_mib)):
            values = {}
            for kind in ("default", "max"):
                text = getattr(self, f"{field}_{kind}")
                if text:
                    try:
                        values[kind] = parse(text)
                    except ValueError as e:
                        found.append(f"DetSpawner.slurm_{field}_{kind}: {e}")
            if len(values) == 2 and values["default"] > values["max"]:
                found.append(f"DetSpawner.slurm_{field}_default: "
                             f"{getattr(self, field + '_default')!r} is more than "
                             f"slurm_{field}_max {getattr(self, field + '_max')!r}")
        for field, setting, names in (("partition", "slurm_partitions", self.partitions),
                                      ("qos", "slurm_qos_choices", self.qos)):
            found += [f"DetSpawner.{setting}: {n!r} is not a Slurm name" for n in names
                      if not _NAME.match(n)]
            if field in self.fields and not names:
                found.append(f"DetSpawner.slurm_form_fields offers {field!r}, but "
                             f"DetSpawner.{setting} lists none to choose from")
        return found

    def check(self) -> None:
        """Raises SlurmOptionsError: the settings cannot be used (see :meth:`problems`)."""
        found = self.problems()
        if found:
            raise SlurmOptionsError("the spawn page's Slurm options are set up wrongly: "
                                    + "; ".join(found))

    def form_html(self) -> str:
        """The spawn page's fields, empty when none is offered."""
        self.check()
        if not self.fields:
            return ""
        rows = ["<fieldset><legend>Slurm job</legend>"]
        for field in FIELDS:
            if field not in self.fields:
                continue
            name = f"slurm_{field}"
            label = f'<label for="{name}">{LABELS[field]}</label>'
            if field in ("partition", "qos"):
                choices = self.partitions if field == "partition" else self.qos
                options = '<option value="">the pool\'s own</option>' + "".join(
                    f'<option value="{html.escape(c)}">{html.escape(c)}</option>'
                    for c in choices)
                rows.append(f'{label}<select name="{name}" id="{name}" class="form-control">'
                            f"{options}</select>")
                continue
            default = getattr(self, f"{field}_default")
            limit = getattr(self, f"{field}_max")
            hint = "minutes, H:MM:SS or D-HH:MM:SS" if field == "time" else "such as 512M or 4G"
            hint += f"; at most {limit}" if limit else ""
            placeholder = html.escape(default or ("the pool's own"))
            rows.append(f'{label}<input name="{name}" id="{name}" class="form-control" '
                        f'placeholder="{placeholder}" aria-describedby="{name}_hint">'
                        f'<small id="{name}_hint" class="form-text">{html.escape(hint)}'
                        "</small>")
        rows.append("</fieldset>")
        return "".join(rows)

    def from_form(self, formdata: Mapping[str, Sequence[str]]) -> dict[str, str]:
        """The user's choices in the spawn page's form data (``slurm_time`` and the rest;
        empty fields left out), checked (see :meth:`choose`)."""
        chosen = {field: str((formdata.get(f"slurm_{field}") or [""])[0]).strip()
                  for field in FIELDS if f"slurm_{field}" in formdata}
        return self.choose({k: v for k, v in chosen.items() if v})

    def choose(self, chosen: Any) -> dict[str, str]:
        """The user's choices (``{"time": "1:00:00", "mem": "4G", ...}``: what the spawn page
        or the hub's REST API gave as ``user_options["slurm"]``), checked against the
        settings and normalised.

        Raises:
            SlurmOptionsError: A choice not offered, in a wrong format, over its limit or not
                in the admin's list; every problem, each naming its field.
        """
        self.check()
        if chosen is None:
            return {}
        if not isinstance(chosen, Mapping):
            raise SlurmOptionsError(f"Slurm options must be a mapping of {', '.join(FIELDS)} "
                                    f"to values; got {type(chosen).__name__}")
        found, out = [], {}
        for field, value in chosen.items():
            label = LABELS.get(str(field), str(field))
            if field not in self.fields:
                offered = ", ".join(self.fields) or "none"
                found.append(f"{label}: not an option this hub offers (it offers: {offered})")
                continue
            if not isinstance(value, str) or not value.strip():
                found.append(f"{label}: must be a non-empty text; got {value!r}")
                continue
            text = value.strip()
            if field in ("partition", "qos"):
                allowed = self.partitions if field == "partition" else self.qos
                if text not in allowed:
                    found.append(f"{label}: {text!r} is not offered; choose one of "
                                 f"{', '.join(allowed)}")
                    continue
            else:
                parse = time_seconds if field == "time" else memory_mib
                try:
                    amount = parse(text)
                except ValueError as e:
                    found.append(f"{label}: {e}")
                    continue
                limit = getattr(self, f"{field}_max")
                if limit and amount > parse(limit):
                    found.append(f"{label}: {text!r} is more than the {limit} this hub allows")
                    continue
            out[str(field)] = _normal(str(field), text)
        if found:
            raise SlurmOptionsError("; ".join(found))
        return out

    def with_defaults(self, chosen: Mapping[str, str]) -> dict[str, str]:
        """The user's checked choices, with the admin's defaults where they chose nothing."""
        defaults = {"time": self.time_default, "mem": _normal("mem", self.mem_default)}
        return {**{k: v for k, v in defaults.items() if v}, **chosen}


def sbatch_args(options: Mapping[str, str]) -> list[str]:
    """The ``sbatch`` options of checked choices, in :data:`FIELDS` order."""
    return [f"{FLAGS[field]}={options[field]}" for field in FIELDS if options.get(field)]


__all__ = ["FIELDS", "SlurmFormSettings", "SlurmOptionsError", "memory_mib", "sbatch_args",
           "time_seconds"]
