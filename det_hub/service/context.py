"""What users upload to start work, as the API sees it: a context archive (base64 in, checked
archive or an error out) and a config (YAML text in, validated config or an error out).

The checking is :func:`det_hub.archive.check_archive`'s and the config parsers'; this module
turns a refusal into the API's answer (400 naming the member or the setting, 413 for a size
bound). Both are plain blocking code, which :func:`read_context` and :func:`read_config` run
in a worker thread, off the event loop, under limits that are the master's settings.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Callable
from typing import Any, TypeVar

import yaml

from det_hub.archive import ContextError, ContextLimits, check_archive
from det_hub.config import ConfigError, ConfigLimitError, ConfigLimits, load_yaml
from det_hub.service.errors import APIError, BadRequest, TooLarge

__all__ = ["decode_context", "read_config", "read_context", "read_yaml"]

T = TypeVar("T")


def decode_context(context_b64: str, limits: ContextLimits) -> bytes:
    """Decode an uploaded context and check it completely.

    Args:
        context_b64: The archive (a .tar.gz), base64-encoded.
        limits: The bounds it must keep.

    Returns:
        The archive's bytes.

    Raises:
        BadRequest: Not base64, not a readable archive, or an unsafe member; the message
            names the member, and ``details`` holds ``{"member": ..., "message": ...}``.
        TooLarge: Over a size bound (unpacked size, member count, inflated bytes).
    """
    try:
        context = base64.b64decode(context_b64, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise BadRequest("context: not valid base64") from None
    try:
        check_archive(context, limits)
    except ContextError as e:
        details = [] if e.member is None else [{"member": e.member, "message": str(e)}]
        if e.too_large:
            raise TooLarge(str(e), details) from None
        raise BadRequest(str(e), details) from None
    return context


async def read_context(context_b64: str | None, limits: ContextLimits) -> bytes | None:
    """:func:`decode_context` in a worker thread (the event loop only routes), before anything
    is stored; None when no context was sent.

    Raises:
        BadRequest, TooLarge: As :func:`decode_context`.
    """
    if not context_b64:
        return None
    return await asyncio.to_thread(decode_context, context_b64, limits)


def config_refusal(error: ConfigLimitError) -> APIError:
    """The API's answer to a config past a limit: 413 for a size bound, else 400; the
    message names the limit, its value and the setting that changes it."""
    details = [{"path": p.path, "message": p.message} for p in error.problems]
    if error.too_large:
        return TooLarge(str(error), details)
    return BadRequest(str(error), details)


async def read_config(parse: Callable[[Any, ConfigLimits], T], source: Any,
                      limits: ConfigLimits, what: str) -> T:
    """``parse(source, limits)`` (one of the config parsers) in a worker thread.

    Args:
        parse: :func:`~det_hub.config.parse_experiment_config` or another parser.
        source: YAML text, or an already loaded mapping.
        limits: The bounds the config must keep.
        what: The config, for the message of a 400 (``"the experiment config"``).

    Raises:
        BadRequest: Invalid (each detail a ``{"path", "message"}``), or past a limit other
            than size.
        TooLarge: Larger than the size bound, as text or with its aliases expanded.
    """
    try:
        return await asyncio.to_thread(parse, source, limits)
    except ConfigLimitError as e:
        raise config_refusal(e) from None
    except ConfigError as e:
        raise BadRequest(f"{what} is invalid", [
            {"path": p.path, "message": p.message} for p in e.problems]) from None


async def read_yaml(text: str, limits: ConfigLimits, what: str) -> Any:
    """YAML text from a user (:func:`~det_hub.config.load_yaml`) read in a worker thread.

    Raises:
        BadRequest: Not YAML, or past a limit other than size; the message begins with
            ``what``.
        TooLarge: Larger than the size bound.
    """
    try:
        return await asyncio.to_thread(load_yaml, text, limits, what=what)
    except ConfigLimitError as e:
        raise config_refusal(e) from None
    except yaml.YAMLError as e:
        raise BadRequest(f"{what}: invalid YAML: {e}") from None
