"""``det-hub preview-search CONFIG``: the trials and lengths a config's search will produce,
worked out locally before anything is submitted."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .experiment import rung_rows

if TYPE_CHECKING:
    from det_hub.searcher.preview import SearchPreview


def _preview(args: argparse.Namespace) -> int:
    from det_hub.config import ConfigError, merge_config, parse_experiment_config
    from det_hub.console import UserError, config_overrides, read_config_mapping
    from det_hub.console import render as r
    from det_hub.searcher import SamplerUnavailable, UnsupportedSearcher
    from det_hub.searcher.preview import preview_json, preview_search

    config = merge_config(read_config_mapping(args.config), config_overrides(args))
    try:
        parsed = parse_experiment_config(config)
        seed = parsed.reproducibility.experiment_seed
        preview = preview_search(parsed, seed=args.seed if args.seed is not None else seed or 0)
    except ConfigError as e:
        raise UserError(f"{args.config} is not a valid experiment config:\n{e}") from None
    except (UnsupportedSearcher, SamplerUnavailable) as e:
        raise UserError(str(e)) from None
    if args.json:
        r.print_json(preview_json(preview))
        return 0
    _print(parsed.searcher.metric, parsed.searcher.smaller_is_better, preview)
    return 0


def _print(metric: str, smaller_is_better: bool, preview: SearchPreview) -> None:
    from det_hub.console import render as r

    unit = preview.unit or "units"
    direction = "smaller is better" if smaller_is_better else "larger is better"
    print(f"Searcher {preview.searcher}: {preview.trials} trials, metric {metric} ({direction})")
    if preview.max_length is None:
        print("The training code decides how long each trial trains (no searcher.max_length).")
        return
    print()
    r.print_table(["Trials", f"Trained to ({unit})"],
                  [[count, f"{length:,}"] for length, count in preview.lengths.items()])
    print()
    full = preview.full_total or 0
    share = f" ({preview.total / full:.0%} of {full:,} for every trial at full length)" \
        if full and preview.total != full else ""
    print(f"Total: {preview.total:,} {unit}{share}")
    if preview.rungs:
        print()
        print("Rungs:")
        headers, rows = rung_rows(preview.rungs)
        keep = [headers.index(h) for h in ("Bracket", "Rung", "Length", "Reported")]
        r.print_table([headers[i] for i in keep], [[row[i] for i in keep] for row in rows])
        print()
        print("How far each trial gets depends on the metrics it reports; this is one outcome, "
              "simulated with random metrics.")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
             json_parent: argparse.ArgumentParser) -> None:
    """Adds ``preview-search``."""
    preview = subparsers.add_parser(
        "preview-search", parents=[json_parent],
        help="show the trials and lengths a config's search will produce",
        description="Simulate the search of an experiment config without a master: how many "
        "trials it creates, how far they train and, for ASHA, its rungs.")
    preview.add_argument("config", metavar="CONFIG", help="experiment config file (YAML)")
    preview.add_argument("--config", dest="overrides", action="append", metavar="KEY=VALUE",
                         help="change one setting first (repeatable)")
    preview.add_argument("--seed", type=int,
                         help="seed of the simulation (default: the config's experiment_seed)")
    preview.set_defaults(func=_preview)
