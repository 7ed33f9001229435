"""Where the SDK finds the master and the token when the caller names neither."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from det_hub.defaults import DEFAULT_DATA_DIR, DEFAULT_MASTER
from det_hub.env_names import DATA_DIR_ENV, MASTER_ENV, TOKEN_ENV

ADMIN_TOKEN_FILE = "admin-token"
#: Tokens saved by ``det-hub user login``, by master URL.
SAVED_TOKENS_FILE = "tokens.json"
_LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def resolve_master(master: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """Returns the master's base URL, without a trailing slash.

    Order: the ``master`` argument, then ``DET_HUB_MASTER``, then ``http://127.0.0.1:8080``. A
    bare ``host:port`` gets ``http://``; a trailing ``/api/v1`` is dropped, since the SDK adds it.

    Args:
        master: The URL given by the caller, if any.
        env: The environment to read (``os.environ`` by default).
    """
    env = os.environ if env is None else env
    url = (master or env.get(MASTER_ENV) or DEFAULT_MASTER).strip()
    if "://" not in url:
        url = "http://" + url
    url = url.rstrip("/")
    if url.endswith("/api/v1"):
        url = url[: -len("/api/v1")]
    return url


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """Returns the det_hub data directory: ``DET_HUB_DATA_DIR``, else ``~/.det_hub``."""
    env = os.environ if env is None else env
    return Path(env.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR).expanduser()


def is_local_master(master_url: str) -> bool:
    """Whether the URL names a master on this machine (where its admin-token file can be read)."""
    host = urlsplit(master_url).hostname or ""
    return host in _LOCAL_HOSTS


def resolve_token(
    token: str | None, master_url: str, env: Mapping[str, str] | None = None
) -> str | None:
    """Returns the token to send, or ``None`` when none is known.

    Order: the ``token`` argument, then ``DET_HUB_TOKEN``, then the token ``det-hub user login``
    saved for this very master URL, then, for a master on this machine only, the
    ``admin-token`` file that ``det-hub master`` writes into the data directory. A remote
    master's token is never taken from a local file, so it is not sent to the wrong host.

    Args:
        token: The token given by the caller, if any.
        master_url: The resolved master URL.
        env: The environment to read (``os.environ`` by default).
    """
    env = os.environ if env is None else env
    if token:
        return token
    if env.get(TOKEN_ENV):
        return env[TOKEN_ENV]
    saved = saved_tokens(env).get(master_url)
    if saved:
        return saved
    if is_local_master(master_url):
        path = data_dir(env) / ADMIN_TOKEN_FILE
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return text or None
    return None


def saved_tokens(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The tokens ``det-hub user login`` saved, by master URL (empty when there are none)."""
    try:
        loaded = json.loads((data_dir(env) / SAVED_TOKENS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}


def save_token(master_url: str, token: str | None, env: Mapping[str, str] | None = None) -> Path:
    """Save (or, with None, forget) the token for ``master_url``, in a file of mode 0600."""
    tokens = saved_tokens(env)
    if token is None:
        tokens.pop(master_url, None)
    else:
        tokens[master_url] = token
    path = data_dir(env) / SAVED_TOKENS_FILE
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # the master's data dir too
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(tokens, f, indent=1)
    return path


__all__ = ["DEFAULT_MASTER", "data_dir", "is_local_master", "resolve_master", "resolve_token",
           "save_token", "saved_tokens"]
