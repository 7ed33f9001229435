"""YAML from users, read under limits: no alias bombs, no deep nesting, no huge configs.

``yaml.safe_load`` alone takes anything: 500 bytes of nested aliases ("billion laughs") load
as a structure that is small in memory (aliases share their node) but expands to gigabytes
the moment it is validated, copied or stored as JSON; ten thousand ``[`` overflow the
composer's recursion; and fifty megabytes of text take a minute to read. :func:`load_yaml`
refuses each before it costs much, by these rules (:class:`ConfigLimits`):

* **Size** (``max_bytes``): the text may be at most this many bytes (checked before it is
  read), and so may the config *after expansion*, measured as the characters of all its
  keys and values with each alias counted as a full copy of what it refers to. Without
  aliases that is never more than the text, so only expansion can pass it.
* **Aliases** (``max_alias_factor``): the nodes of the config after expansion may be at most
  this many times the nodes written (an alias written counts as one node written). A config
  without aliases has a factor of 1; a few reused sections stay well below the default of 10;
  an alias bomb's factor grows exponentially and is refused after a few hundred nodes. The
  rule is checked at every node, against the most nodes the rest of the text could still
  write, so a bomb is refused as soon as it is certain to fail, long before it has expanded.
* **Depth** (``max_depth``): lists and mappings nest at most this many levels (the top-level
  mapping is level 1). Checked as the text is read, so deep input never reaches a recursion.
* An alias inside the node it refers to (``&a [*a]``) is refused: such a config has no end.

Written here rather than taken from a library because PyYAML has no such limits; the rules sit
on its composer, which builds the node graph from the events of libyaml's parser when that is
installed (fast, and without recursion) or of PyYAML's own.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, ScalarEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from det_hub.config._errors import ConfigError, Problem

__all__ = ["DEFAULT_LIMITS", "LOCAL_LIMITS", "ConfigLimitError", "ConfigLimits", "check_depth",
           "load_yaml"]

_SETTING_FIELDS = ("max_bytes", "max_alias_factor", "max_depth")
#: The deepest nesting any setting may allow: the code that reads a config (validation,
#: deep copies, JSON) recurses a few frames per level, and Python stops at 1000 frames.
MAX_DEPTH_CEILING = 200


@dataclass(frozen=True)
class ConfigLimits:
    """Bounds on a config read from YAML (see the module's docstring for the rules).

    Attributes:
        max_bytes: The largest config, in bytes of text and in size after alias expansion.
        max_alias_factor: The most nodes after alias expansion per node written.
        max_depth: The most levels lists and mappings may nest (at most 200).
        settings: For each limit's name (``"max_bytes"``, ...), the setting that changes it,
            named in refusals (``"MasterApp.config_max_bytes"``); empty outside the master.
    """

    max_bytes: int = 1024 * 1024
    max_alias_factor: int = 10
    max_depth: int = 64
    settings: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        for name in _SETTING_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ConfigLimits.{name} must be a positive integer, not {value!r}")
        if self.max_depth > MAX_DEPTH_CEILING:
            raise ValueError(f"ConfigLimits.max_depth must be at most {MAX_DEPTH_CEILING}, not "
                             f"{self.max_depth}")

    def describe(self, name: str, unit: str) -> str:
        """``"the limit is 64 levels (MasterApp.config_max_depth)"``, for a refusal."""
        setting = self.settings.get(name)
        where = f" ({setting})" if setting else f" (ConfigLimits.{name})"
        return f"the limit is {getattr(self, name)}{unit}{where}"


#: The limits of the master's settings by default, and of :func:`load_yaml` where none are
#: given.
DEFAULT_LIMITS = ConfigLimits()
#: The limits of the config parsers where none are given: for configs read where no master
#: setting applies (a user's own file on their machine, one the master wrote for a task). No
#: size bound (the master keeps its own, and a config it took may be written out larger than
#: it was sent), nesting to the ceiling, and aliases at the default factor, so that a bomb
#: still cannot hang whoever reads it.
LOCAL_LIMITS = ConfigLimits(max_bytes=sys.maxsize, max_depth=MAX_DEPTH_CEILING)


class ConfigLimitError(ConfigError):
    """A config refused for passing one of :class:`ConfigLimits`.

    Attributes:
        limit: The name of the limit passed (``"max_bytes"``, ``"max_alias_factor"``,
            ``"max_depth"``).
        too_large: Whether it was a size bound (an HTTP 413 rather than a 400).
    """

    def __init__(self, message: str, *, limit: str, too_large: bool = False) -> None:
        super().__init__([Problem("", message)])
        self.limit = limit
        self.too_large = too_large

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments do not survive pickling (a process pool) by default.
        return (_rebuild_limit_error, (str(self), self.limit, self.too_large))


def _rebuild_limit_error(message: str, limit: str, too_large: bool) -> ConfigLimitError:
    return ConfigLimitError(message, limit=limit, too_large=too_large)


def load_yaml(text: str | bytes, limits: ConfigLimits = DEFAULT_LIMITS, *,
              what: str = "the config") -> Any:
    """Read one YAML document from a user, as ``yaml.safe_load`` does, under ``limits``.

    Args:
        text: The YAML text (``bytes`` must be UTF-8).
        limits: The bounds it must keep.
        what: What the text is, for messages (``"the config"``, ``"--config-file"``).

    Returns:
        The loaded value (None for an empty document).

    Raises:
        ConfigLimitError: Past a limit; the message names the limit, its value and the
            setting that changes it.
        yaml.YAMLError: Not YAML (as ``yaml.safe_load`` raises it).
        UnicodeDecodeError: ``bytes`` that are not UTF-8.
    """
    size, exact = len(text), True
    if isinstance(text, str) and not text.isascii():
        # At most as many characters as UTF-8 bytes: a longer one is over already.
        if size <= limits.max_bytes:
            size = len(text.encode("utf-8", "surrogatepass"))
        else:
            exact = False
    # Marks count characters (PyYAML's parser) or bytes (libyaml's): bytes bound both.
    if size > limits.max_bytes:
        raise ConfigLimitError(
            f"{what} is {'' if exact else 'at least '}{_size_text(size)}, larger than "
            f"{limits.max_bytes} bytes; " + limits.describe("max_bytes", " bytes"),
            limit="max_bytes", too_large=True)
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    try:
        return _read(_FAST_LOADER, text, size, limits, what)
    except yaml.MarkedYAMLError as exc:
        # libyaml stops at 1000 levels of flow collections while it scans ahead, before our
        # composer has seen them: the same limit, found earlier.
        if "maximum nesting depth" in str(exc.problem):
            raise _too_deep(what, limits, _at_mark(exc.problem_mark)) from None
        if _FAST_LOADER is _PyLoader:
            raise
    # libyaml's messages differ from PyYAML's, which users (and our docs) know: read broken
    # text again for PyYAML's message. Only text that fails pays this.
    return _read(_PyLoader, text, size, limits, what)


def _read(loader_class: Any, text: str, size: int, limits: ConfigLimits, what: str) -> Any:
    loader = loader_class(text, size, limits, what)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def check_depth(data: Any, limits: ConfigLimits = DEFAULT_LIMITS, *,
                what: str = "the config") -> None:
    """Refuse already loaded data (lists and mappings) that nests deeper than
    ``limits.max_depth``, without recursing.

    Raises:
        ConfigLimitError: Naming the limit and its setting.
    """
    stack: list[tuple[Any, int]] = [(data, 1)]
    seen: set[int] = set()
    while stack:
        value, depth = stack.pop()
        if isinstance(value, Mapping):
            children: Any = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        if depth > limits.max_depth:
            raise _too_deep(what, limits, "")
        if id(value) in seen:
            continue  # shared, or a cycle: its depth below is checked once
        seen.add(id(value))
        stack.extend((child, depth + 1) for child in children)


def _too_deep(what: str, limits: ConfigLimits, where: str) -> ConfigLimitError:
    return ConfigLimitError(
        f"{what} nests lists and mappings more than {limits.max_depth} levels deep{where}; "
        + limits.describe("max_depth", " levels"), limit="max_depth")


def _size_text(n: int) -> str:
    mib = 1024 * 1024
    return f"{n} bytes ({n / mib:.1f} MiB)" if n >= mib else f"{n} bytes"


def _at(node_or_event: Any) -> str:
    return _at_mark(getattr(node_or_event, "start_mark", None))


def _at_mark(mark: Any) -> str:
    if mark is None:
        return ""
    return f" (at line {mark.line + 1}, column {mark.column + 1})"


class _LimitedComposer(Composer):
    """PyYAML's composer, counting what it builds against :class:`ConfigLimits`."""

    def __init__(self, size: int, limits: ConfigLimits, what: str) -> None:
        Composer.__init__(self)
        self.limits = limits
        self.what = what
        self.text_length = size
        self.depth = 0
        self.written = 0
        #: id(node) -> (nodes, characters) after expansion, for every node composed so far.
        self.expanded: dict[int, tuple[int, int]] = {}

    if TYPE_CHECKING:  # the parser's, mixed in by the loader classes
        def check_event(self, *choices: Any) -> bool: ...

        def peek_event(self) -> Any: ...

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        limits = self.limits
        if self.check_event(AliasEvent):
            event = self.peek_event()
            node = cast(Node, Composer.compose_node(self, parent, index))  # undefined: raises
            self.written += 1
            if id(node) not in self.expanded:
                raise ConfigLimitError(
                    f"{self.what} has an alias *{event.anchor} inside the node it refers "
                    f"to{_at(event)}, which would never end", limit="max_alias_factor")
            return node
        if self.check_event(ScalarEvent):
            node = cast(Node, Composer.compose_node(self, parent, index))
        else:  # a list or mapping: one level deeper
            self.depth += 1
            if self.depth > limits.max_depth:
                raise _too_deep(self.what, limits, _at(self.peek_event()))
            node = cast(Node, Composer.compose_node(self, parent, index))
            self.depth -= 1
        self.written += 1
        if isinstance(node, ScalarNode):
            nodes, size = 1, len(node.value)
        else:
            children: list[Node]
            if isinstance(node, SequenceNode):
                children = node.value
            else:
                assert isinstance(node, MappingNode)
                children = [part for pair in node.value for part in pair]
            nodes, size = 1, 0
            for child in children:
                child_nodes, child_size = self.expanded[id(child)]
                nodes += child_nodes
                size += child_size
        self.expanded[id(node)] = (nodes, size)
        self._check(node, nodes, size)
        return node

    def _check(self, node: Node, nodes: int, size: int) -> None:
        limits = self.limits
        # The most nodes the whole text could write: those so far, and at most one per
        # character still unread.
        mark = node.end_mark
        unread = self.text_length - mark.index if mark is not None else self.text_length
        if nodes > limits.max_alias_factor * (self.written + max(unread, 0)):
            raise ConfigLimitError(
                f"{self.what}'s aliases expand it to more than {limits.max_alias_factor} "
                f"times the nodes written{_at(node)}; "
                + limits.describe("max_alias_factor", " times"), limit="max_alias_factor")
        if size > limits.max_bytes:
            raise ConfigLimitError(
                f"{self.what} is larger than {limits.max_bytes} bytes once its aliases are "
                f"expanded{_at(node)}; " + limits.describe("max_bytes", " bytes"),
                limit="max_bytes", too_large=True)


class _PyLoader(Reader, Scanner, Parser, _LimitedComposer, SafeConstructor, Resolver):
    """PyYAML's own parser under our composer."""

    def __init__(self, text: str, size: int, limits: ConfigLimits, what: str) -> None:
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        _LimitedComposer.__init__(self, size, limits, what)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)


def _fast_loader() -> Any:
    """libyaml's parser (about four times faster) under our composer, which comes earlier in
    the method order than the parser's own composing methods; PyYAML's where libyaml is not
    installed."""
    if not getattr(yaml, "__with_libyaml__", False):
        return _PyLoader
    from yaml._yaml import CParser

    class _CLoader(_LimitedComposer, SafeConstructor, Resolver, CParser):
        def __init__(self, text: str, size: int, limits: ConfigLimits, what: str) -> None:
            CParser.__init__(self, text)
            _LimitedComposer.__init__(self, size, limits, what)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    return _CLoader


_FAST_LOADER = _fast_loader()
