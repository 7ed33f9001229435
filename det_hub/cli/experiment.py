"""``det-hub experiment``: create, list, describe and control experiments."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._confirm import confirm
from ._connect import client_from_args

if TYPE_CHECKING:
    from tqdm import tqdm

    from det_hub.client import Client, Experiment, Trial

#: Seconds between checks while waiting for an experiment's first trial.
TRIAL_POLL_SECONDS = 1.0


class _UploadBar:
    """Shows the upload of an experiment's body as a tqdm bar on stderr."""

    def __init__(self) -> None:
        self._bar: tqdm[Any] | None = None

    def __call__(self, sent: int, total: int) -> None:
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, unit="B", unit_scale=True, unit_divisor=1024,
                desc="Uploading", file=sys.stderr, leave=False,
            )
        self._bar.update(sent - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _create(args: argparse.Namespace) -> int:
    from det_hub.config import merge_config
    from det_hub.console import UserError, config_overrides, read_config, read_config_mapping

    if args.fork is None and (args.config is None or args.context is None):
        raise UserError("experiment create needs CONFIG and CONTEXT (or --fork ID to start "
                        "from another experiment)")
    overrides = config_overrides(args)
    client = client_from_args(args)
    bar = _UploadBar()
    try:
        if args.fork is not None:
            # A config file given with --fork is laid over the source's config, like --config.
            if args.config is not None:
                overrides = merge_config(read_config_mapping(args.config), overrides)
            experiment = client.fork_experiment(
                args.fork, overrides, context_dir=args.context, activate=not args.paused,
                name=args.name, progress=bar)
        else:
            config: str | dict[str, Any] = read_config(args.config)
            if overrides:
                config = merge_config(read_config_mapping(args.config), overrides)
            experiment = client.create_experiment(
                config, args.context, activate=not args.paused, name=args.name, progress=bar)
    finally:
        bar.close()
    forked = f" (a fork of experiment {args.fork})" if args.fork is not None else ""
    print(f"Created experiment {experiment.id}{forked}")
    if args.follow:
        return follow_experiment(client, experiment.id)
    return 0


def _continue(args: argparse.Namespace) -> int:
    from det_hub.console import config_overrides

    overrides = config_overrides(args)
    client = client_from_args(args)
    start = None
    if args.follow:
        # Follow the first trial the master reopens, from the first line it writes anew.
        trials = list(client.list_trials(args.id))
        again = [t for t in trials if t.state in ("CANCELED", "ERROR")] or trials
        if again:
            trial = min(again, key=lambda t: t.id)
            start = (trial.id, max((int(line["id"]) for line in client.trial_logs(trial.id)),
                                   default=0))
    experiment = client.continue_experiment(args.id, overrides)
    print(f"Continued experiment {experiment.id}: {experiment.state}")
    if args.follow:
        return follow_experiment(client, experiment.id, start=start)
    return 0


def _wait_first_trial(client: Client, experiment_id: int) -> Trial | None:
    """The experiment's first trial once it exists; ``None`` if the experiment ends without one."""
    while True:
        trials = client.list_trials(experiment_id)
        if trials:
            return min(trials, key=lambda t: t.id)
        if client.get_experiment(experiment_id).is_terminal:
            return None
        time.sleep(TRIAL_POLL_SECONDS)


def follow_experiment(client: Client, experiment_id: int, *,
                      start: tuple[int, int] | None = None) -> int:
    """Prints the first trial's logs (with ``start``, ``(trial id, log id)``: that trial's
    lines after that id), then waits for the experiment to end.

    Returns:
        0 if the experiment COMPLETED, 1 if it ended otherwise, 130 if the user pressed Ctrl-C
        (which stops following only; the experiment goes on).
    """
    from det_hub.console import format_log_line

    try:
        if start is None:
            trial = _wait_first_trial(client, experiment_id)
            trial_id, after = (trial.id if trial is not None else None), 0
        else:
            trial_id, after = start
        if trial_id is not None:
            print(f"Following trial {trial_id} of experiment {experiment_id}", file=sys.stderr)
            for line in client.trial_logs(trial_id, follow=True, after_id=after):
                print(format_log_line(line), flush=True)
        experiment = client.wait_for_experiment(experiment_id)
    except KeyboardInterrupt:
        print(
            f"\nStopped following experiment {experiment_id}; it keeps running. "
            f"To stop it: det-hub experiment kill {experiment_id}",
            file=sys.stderr,
        )
        return 130
    print(f"Experiment {experiment_id} ended: {experiment.state}")
    return 0 if experiment.state == "COMPLETED" else 1


def _experiment_row(e: Experiment, show_archived: bool) -> list[Any]:
    from det_hub.console import render as r

    row: list[Any] = [
        e.id, e.owner or r.NONE, e.name or r.NONE, e.state, r.fmt_percent(e.progress), e.num_trials,
        e.resource_pool or r.NONE, r.fmt_time(e.created_at), r.fmt_duration(e.created_at, e.ended_at),
    ]
    if show_archived:
        row.append(r.fmt_bool(e.archived))
    return row


def _list(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    client = client_from_args(args)
    # Like Determined's `det e list`: your own unarchived experiments unless asked otherwise.
    owner = None if args.all else client.me().username
    archived = None if args.archived else False
    experiments = client.list_experiments(
        archived=archived, owner=owner, state=args.state, limit=args.limit, offset=args.offset
    )
    if args.json:
        r.print_json(experiments.raw)
        return 0
    headers = ["ID", "Owner", "Name", "State", "Progress", "Trials", "Pool", "Started", "Duration"]
    if args.archived:
        headers.append("Archived")
    r.print_table(headers, (_experiment_row(e, args.archived) for e in experiments))
    if experiments.total > args.offset + len(experiments):
        print(
            f"Showing {len(experiments)} of {experiments.total}; see more with --offset "
            f"{args.offset + len(experiments)} or a larger --limit",
            file=sys.stderr,
        )
    return 0


def _describe(args: argparse.Namespace) -> int:
    from det_hub.console import best_trial, trial_rows
    from det_hub.console import render as r

    client = client_from_args(args)
    experiment = client.get_experiment(args.id)
    trials = client.list_trials(args.id)
    search = client.get_searcher(args.id)
    if args.json:
        r.print_json({"experiment": experiment.raw, "trials": trials.raw.get("trials", []),
                      "searcher": search})
        return 0
    searcher = experiment.config.get("searcher")
    searcher_name = searcher.get("name") if isinstance(searcher, dict) else None
    metric = experiment.searcher_metric
    direction = "smaller is better" if experiment.smaller_is_better else "larger is better"
    r.print_fields([
        ("ID", experiment.id),
        ("Name", r.or_none(experiment.name)),
        ("Description", r.or_none(experiment.description)),
        ("Owner", r.or_none(experiment.owner)),
        ("State", experiment.state),
        ("Progress", r.fmt_percent(experiment.progress)),
        ("Archived", r.fmt_bool(experiment.archived)),
        ("Searcher", r.or_none(searcher_name)),
        ("Metric", f"{metric} ({direction})" if metric else r.NONE),
        ("Resource pool", r.or_none(experiment.resource_pool)),
        ("Priority", r.or_none(experiment.priority)),
        ("Trials", len(trials)),
        ("Started", r.fmt_time(experiment.created_at)),
        ("Ended", r.fmt_time(experiment.ended_at)),
        ("Duration", r.fmt_duration(experiment.created_at, experiment.ended_at)),
    ])
    print()
    print("Trials:")
    r.print_table(*trial_rows(list(trials)))
    best = best_trial(experiment, list(trials))
    if best is not None:
        print()
        print(
            f"Best {metric or 'metric'}: {r.fmt_value(best.searcher_metric_value)} "
            f"(trial {best.id}, {r.fmt_mapping(best.hparams)})"
        )
    if search.get("rungs"):
        print()
        print("Rungs:")
        r.print_table(*rung_rows(search["rungs"]))
    return 0


def rung_rows(table: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """One row per rung of each ASHA bracket: its length, results, best value, promotions."""
    from det_hub.console import render as r

    carried = "continued" if table.get("stop_once", True) else "promoted"
    headers = ["Bracket", "Rung", "Length", "Reported", "Best", carried.capitalize(),
               "Training", "Trials (best first)"]
    rows = []
    for bracket in table.get("brackets", []):
        for rung in bracket.get("rungs", []):
            rows.append([
                bracket.get("index"), rung.get("index"), rung.get("length"),
                rung.get("reported"), r.fmt_value(rung.get("best_metric")),
                rung.get("promoted"), len(rung.get("training", [])),
                r.or_none(", ".join(str(t) for t in rung.get("trial_ids", [])[:8])
                          + (" ..." if len(rung.get("trial_ids", [])) > 8 else "")),
            ])
    return headers, rows


def _list_trials(args: argparse.Namespace) -> int:
    from det_hub.console import render as r
    from det_hub.console import trial_rows

    trials = client_from_args(args).list_trials(args.id)
    if args.json:
        r.print_json(trials.raw)
        return 0
    r.print_table(*trial_rows(list(trials)))
    return 0


def _action(method: str) -> Callable[[argparse.Namespace], int]:
    """A verb that calls the client's ``method`` (e.g. ``pause_experiment``) on one experiment
    and prints its new state."""

    def run(args: argparse.Namespace) -> int:
        from det_hub.console import render as r

        experiment: Experiment = getattr(client_from_args(args), method)(args.id)
        if args.json:
            r.print_json({"experiment": experiment.raw})
        else:
            archived = " (archived)" if experiment.archived else ""
            print(f"Experiment {experiment.id}: {experiment.state}{archived}")
        return 0

    return run


def _set_gc_policy(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    client = client_from_args(args)
    policy = {"save_experiment_best": args.save_experiment_best,
              "save_trial_best": args.save_trial_best,
              "save_trial_latest": args.save_trial_latest}
    plan = client.checkpoint_gc(args.id, **policy, dry_run=True)
    if plan.checkpoints:
        print(f"With {r.fmt_mapping(plan.policy)}, GC would delete {len(plan.uuids)} "
              f"checkpoint(s) of experiment {args.id}:")
        r.print_table(["UUID", "Trial", "Steps", "Size"], [
            [c.uuid, c.trial_id, c.steps_completed, r.fmt_bytes(c.size)]
            for c in plan.checkpoints])
    else:
        print(f"With {r.fmt_mapping(plan.policy)}, GC would delete no checkpoint of experiment "
              f"{args.id}.")
    if plan.registered:
        print(f"Kept because a model version names them: {', '.join(plan.registered)}")
    if plan.uuids and not args.yes and not confirm(
            f"Set this policy and delete {len(plan.uuids)} checkpoint(s)?"):
        print("Nothing changed.", file=sys.stderr)
        return 1
    done = client.checkpoint_gc(args.id, **policy)
    print(f"Experiment {args.id}: checkpoint GC policy set; deleted {len(done.uuids)} "
          "checkpoint(s)")
    return 0


#: Each verb that changes an experiment's state: the :class:`~det_hub.client.Client` method
#: it calls (by name, so that building the parser does not load the SDK), and its help.
_ACTIONS: dict[str, tuple[str, str]] = {
    "pause": ("pause_experiment", "pause an active experiment"),
    "activate": ("activate_experiment", "activate a paused experiment"),
    "cancel": ("cancel_experiment",
               "stop an experiment gracefully: its trials checkpoint, then stop; it ends "
               "CANCELED"),
    "kill": ("kill_experiment", "stop an experiment's trials now; it ends CANCELED"),
    "archive": ("archive_experiment", "hide a finished experiment from lists"),
    "unarchive": ("unarchive_experiment", "show an archived experiment again"),
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], json_parent: argparse.ArgumentParser) -> None:
    """Adds ``experiment`` (alias ``e``) and its verbs."""
    noun = subparsers.add_parser("experiment", aliases=["e"], help="manage experiments")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)

    overrides_parent = argparse.ArgumentParser(add_help=False)
    overrides_parent.add_argument(
        "--config", dest="overrides", action="append", metavar="KEY=VALUE",
        help="change one setting, e.g. searcher.max_length.batches=2000 (repeatable; the value "
        "is YAML)")

    create = verbs.add_parser(
        "create", parents=[overrides_parent], help="submit an experiment",
        description="Submit an experiment from CONFIG and CONTEXT, or fork one with --fork: "
        "its config (with CONFIG, if given, laid over it) and its context (unless CONTEXT is "
        "given).")
    create.add_argument("config", metavar="CONFIG", nargs="?",
                        help="experiment config file (YAML)")
    create.add_argument("context", metavar="CONTEXT", nargs="?",
                        help="model definition directory")
    create.add_argument("--fork", metavar="ID", type=int,
                        help="start from experiment ID's config and context")
    create.add_argument("-f", "--follow", action="store_true",
                        help="print the first trial's logs and wait for the experiment to end; "
                        "exit 0 if it completes, 1 otherwise")
    create.add_argument("--paused", action="store_true", help="create it paused")
    create.add_argument("--name", help="experiment name (replaces the config's)")
    create.set_defaults(func=_create)

    cont = verbs.add_parser(
        "continue", parents=[overrides_parent],
        help="train a finished experiment on from its latest checkpoints",
        description="Train a finished experiment on, in place. A single-trial experiment "
        "reopens its trial, which trains from its latest checkpoint to searcher.max_length "
        "(raise it with --config searcher.max_length.batches=N); any setting may change. A "
        "search reruns its canceled and failed trials.")
    cont.add_argument("id", metavar="ID", type=int)
    cont.add_argument("--config-file", metavar="FILE",
                      help="YAML of settings to change, merged into the experiment's config")
    cont.add_argument("-f", "--follow", action="store_true",
                      help="print the trial's new logs and wait for the experiment to end")
    cont.set_defaults(func=_continue)

    listing = verbs.add_parser("list", parents=[json_parent], help="list your experiments")
    listing.add_argument("--all", "-a", action="store_true", help="every user's experiments")
    listing.add_argument("--archived", action="store_true", help="include archived experiments")
    listing.add_argument("--state", help="only experiments in this state (RUNNING, QUEUED, COMPLETED ...; ACTIVE for every active one)")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    listing.add_argument("--offset", type=int, default=0, help="skip this many")
    listing.set_defaults(func=_list)

    describe = verbs.add_parser("describe", parents=[json_parent],
                                help="show an experiment, its trials and its best metric")
    describe.add_argument("id", metavar="ID", type=int)
    describe.set_defaults(func=_describe)

    list_trials = verbs.add_parser("list-trials", aliases=["lt"], parents=[json_parent],
                                   help="list an experiment's trials")
    list_trials.add_argument("id", metavar="ID", type=int)
    list_trials.set_defaults(func=_list_trials)

    for verb, (method, text) in _ACTIONS.items():
        action = verbs.add_parser(verb, parents=[json_parent], help=text)
        action.add_argument("id", metavar="ID", type=int)
        action.set_defaults(func=_action(method))

    settings = verbs.add_parser("set", help="change an experiment's settings")
    what = settings.add_subparsers(dest="setting", metavar="SETTING", required=True)
    gc = what.add_parser(
        "gc-policy", help="set the checkpoint retention policy and run checkpoint GC now",
        description="Set the experiment's checkpoint_storage retention settings (those given; "
        "the others keep their value) and delete, now, the checkpoints they let go. What "
        "would be deleted is shown first, and asked about unless --yes. Checkpoints a model "
        "version names, and the latest checkpoint of each trial that can still run, are kept.")
    gc.add_argument("id", metavar="EXP_ID", type=int)
    for option, text in (("--save-experiment-best", "the experiment's best"),
                         ("--save-trial-best", "each trial's best"),
                         ("--save-trial-latest", "each trial's latest")):
        gc.add_argument(option, type=int, metavar="N", help=f"keep {text} N checkpoints")
    gc.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    gc.set_defaults(func=_set_gc_policy)
