"""Experiments created from files on the notebook server, for the JupyterLab panel.

The browser names a config file and a context directory as its file browser shows them
(relative to the server's root directory). The server reads the config, packs the directory
with the det_hub client's :func:`~det_hub.client.pack_context` (``.detignore`` and all) and
sends both to the master, so that no archive passes through the browser. Nothing here knows of
HTTP: :func:`parse_launch` and :func:`experiment_body` are called by the handler.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from det_hub.client import ContextError, ContextTooLarge, pack_context
from det_hub.extension.errors import BadPath, BadRequest, NotFound, TooLarge

#: The largest config file read: configs are a few kilobytes.
MAX_CONFIG_BYTES = 1024 * 1024


@dataclass(frozen=True)
class LaunchRequest:
    """What to create: ``config_path`` and ``context_dir`` relative to the server's root."""

    config_path: str
    context_dir: str
    activate: bool = True


def parse_launch(body: Any) -> LaunchRequest:
    """The launch request in a JSON body ``{"config_path", "context_dir", "activate"}``.

    ``context_dir`` defaults to the config's folder; ``activate`` to true.

    Raises:
        BadRequest: A field is missing or of the wrong type; each detail names one.
    """
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object",
                         [{"path": "", "message": "expected {\"config_path\": ..., "
                                                  "\"context_dir\": ...}"}])
    details = []
    unknown = sorted(set(body) - {"config_path", "context_dir", "activate"})
    details += [{"path": key, "message": "unknown field"} for key in unknown]
    config_path = body.get("config_path")
    if not isinstance(config_path, str) or not config_path.strip():
        details.append({"path": "config_path", "message": "must be a non-empty string"})
    context_dir = body.get("context_dir")
    if context_dir is not None and not isinstance(context_dir, str):
        details.append({"path": "context_dir", "message": "must be a string"})
    activate = body.get("activate", True)
    if not isinstance(activate, bool):
        details.append({"path": "activate", "message": "must be true or false"})
    if details:
        raise BadRequest("the launch request is not valid", details)
    assert isinstance(config_path, str)
    if context_dir is None:
        context_dir = str(PurePosixPath(config_path).parent)
    return LaunchRequest(config_path, context_dir, activate)


def resolve_in_root(root: str | Path, relative: str, what: str) -> Path:
    """``relative`` (``/``-separated, as the file browser writes it) below ``root``.

    Raises:
        BadPath: The path is absolute, or leads out of ``root`` (by ``..`` or a link).
    """
    pure = PurePosixPath(relative.strip())
    if pure.is_absolute() or "\\" in relative:
        raise BadPath(f"{what} {relative!r} must be relative to the server's root directory")
    base = Path(root).expanduser().resolve()
    path = (base / pure).resolve()
    if path != base and base not in path.parents:
        raise BadPath(f"{what} {relative!r} leads out of the server's root directory")
    return path


def experiment_body(root: str | Path, request: LaunchRequest) -> dict[str, Any]:
    """The body of the master's ``POST /experiments`` for ``request``: the config's text and
    the packed context. Reads files and packs: call it off the event loop.

    Raises:
        BadPath: A path leads out of ``root``.
        NotFound: The config file or the context directory is missing.
        BadRequest: The config is not a readable text file, or the context cannot be packed.
        TooLarge: The context is over the master's limit.
    """
    config = resolve_in_root(root, request.config_path, "config_path")
    context = resolve_in_root(root, request.context_dir, "context_dir")
    if not config.is_file():
        raise NotFound(f"there is no config file {request.config_path!r}")
    if not context.is_dir():
        raise NotFound(f"there is no directory {request.context_dir!r} to use as the context")
    if config.stat().st_size > MAX_CONFIG_BYTES:
        raise BadRequest(f"{request.config_path!r} is over {MAX_CONFIG_BYTES} bytes: not an "
                         "experiment config")
    try:
        config_text = config.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadRequest(f"{request.config_path!r} cannot be read as text", [str(e)]) from e
    try:
        archive = pack_context(context)
    except ContextTooLarge as e:
        raise TooLarge(str(e), ["list what the trials do not need in a .detignore file"]) from e
    except ContextError as e:
        raise BadRequest(str(e)) from e
    except OSError as e:
        raise BadRequest(f"the context {request.context_dir!r} cannot be packed",
                         [str(e)]) from e
    return {"config": config_text, "context": base64.b64encode(archive).decode("ascii"),
            "activate": request.activate}


__all__ = ["MAX_CONFIG_BYTES", "LaunchRequest", "experiment_body", "parse_launch",
           "resolve_in_root"]
