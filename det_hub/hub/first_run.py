"""What a user's first notebook server opens with: det_hub's quickstart notebook and its
examples, copied into the user's home the first time the hub spawns a server there.

For servers that start in a home on the hub's host::

    c.Spawner.pre_spawn_hook = det_hub.hub.first_run.pre_spawn_hook

(``det-hub up`` sets it for its local notebook servers). Servers in containers
(:class:`det_hub.spawner.DetSpawner`) seed their own notebook directory as they start, through
``python -m det_hub.hub.first_run -- <the server's command>``. The copy is made once per home:
a marker file remembers it, so what the user deletes or changes stays as they left it, and a
file already there is never replaced.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: The file in a home that says the examples were put there once.
MARKER = ".det_hub_examples"
#: The notebook that opens first.
QUICKSTART = "quickstart.ipynb"


def examples_source() -> Path | None:
    """det_hub's examples: installed with the package (``share/det_hub/examples`` of its
    environment), or beside the package in a source checkout; None where neither is."""
    package = Path(__file__).resolve().parent.parent
    for folder in (Path(sys.prefix) / "share" / "det_hub" / "examples",
                   package.parent / "examples"):
        if (folder / QUICKSTART).is_file():
            return folder
    return None


def seed_home(home: Path, source: Path) -> list[Path]:
    """Copy the quickstart notebook to the top of ``home`` and the other examples under
    ``home/examples``, unless that was done before (the marker); files already there are
    kept. Answers the files copied."""
    if (home / MARKER).exists():
        return []
    home.mkdir(parents=True, exist_ok=True)
    copied: list[Path] = []
    for path in sorted(source.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        relative = path.relative_to(source)
        target = home / relative if relative == Path(QUICKSTART) else home / "examples" / relative
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        copied.append(target)
    (home / MARKER).write_text("det_hub put its quickstart notebook and examples here once; "
                               "remove this file to have them copied again.\n")
    return copied


def pre_spawn_hook(spawner: Any) -> None:
    """A JupyterHub ``Spawner.pre_spawn_hook`` for spawners whose servers start in a home on
    the hub's host (``home_dir``, as JupyterHub's local spawners have): seeds that home."""
    home = getattr(spawner, "home_dir", None)
    source = examples_source()
    if not home or source is None:
        spawner.log.warning("det_hub: no examples to copy for %s (home %r, examples %s)",
                            spawner.user.name, home, source)
        return
    copied = seed_home(Path(home), source)
    if copied:
        spawner.log.info("det_hub: copied %d files (the quickstart notebook and the examples) "
                         "into %s", len(copied), home)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m det_hub.hub.first_run [--into DIR] -- COMMAND...``: seed DIR (default: the
    working directory, where a notebook server started there opens), then become COMMAND. A
    home that cannot be seeded is said so on stderr, and the server starts all the same."""
    parser = argparse.ArgumentParser(
        prog="python -m det_hub.hub.first_run",
        description="Copy det_hub's quickstart notebook and examples into a new home once, "
                    "then run the notebook server's command.")
    parser.add_argument("--into", default="", help="the home to seed (default: the working "
                        "directory; ~ is the user's home)")
    parser.add_argument("command", nargs="+", help="the command to run next, after --")
    args = parser.parse_args(argv)
    home = Path(os.path.expanduser(args.into)) if args.into else Path.cwd()
    source = examples_source()
    if source is None:
        print(f"det_hub: no examples to copy into {home}: det_hub's examples are not installed "
              "beside it", file=sys.stderr)
    else:
        try:
            copied = seed_home(home, source)
        except OSError as e:
            print(f"det_hub: could not copy the examples into {home}: {e}", file=sys.stderr)
        else:
            if copied:
                print(f"det_hub: copied {len(copied)} files (the quickstart notebook and the "
                      f"examples) into {home}", file=sys.stderr)
    sys.stderr.flush()
    os.execvp(args.command[0], args.command)


if __name__ == "__main__":
    main()
