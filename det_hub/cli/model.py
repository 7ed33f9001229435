"""``det-hub model``: the model registry, its models and their versions."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ._confirm import confirm
from ._connect import client_from_args

if TYPE_CHECKING:
    from det_hub.client import Model, ModelVersion


def _labels(labels: list[str]) -> str:
    from det_hub.console import render as r

    return ", ".join(labels) if labels else r.NONE


def _print_versions(versions: list[ModelVersion]) -> None:
    from det_hub.console import render as r

    r.print_table(
        ["Version", "Checkpoint", "Experiment", "Trial", "Steps", "State", "Name", "Owner",
         "Registered"],
        [[v.version, v.checkpoint.uuid, v.checkpoint.experiment_id, v.checkpoint.trial_id,
          v.checkpoint.steps_completed, v.checkpoint.state, r.or_none(v.name), v.owner,
          r.fmt_time(v.creation_time)]
         for v in versions])


def _print_model(model: Model) -> None:
    from det_hub.console import render as r

    r.print_fields([
        ("Name", model.name),
        ("ID", model.id),
        ("Owner", model.owner),
        ("Description", r.or_none(model.description)),
        ("Labels", _labels(model.labels)),
        ("Metadata", r.fmt_mapping(model.metadata)),
        ("Notes", r.or_none(model.notes)),
        ("Archived", r.fmt_bool(model.archived)),
        ("Versions", model.num_versions),
        ("Created", r.fmt_time(model.creation_time)),
        ("Updated", r.fmt_time(model.last_updated_time)),
    ])


def _create(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    model = client_from_args(args).create_model(
        args.name, description=args.description or "", labels=args.label or [])
    if args.json:
        r.print_json({"model": model.raw})
    else:
        print(f"Created model {model.name} (id {model.id})")
    return 0


def _list(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    models = client_from_args(args).list_models(
        archived=None if args.archived else False, label=args.label, name=args.name_contains,
        limit=args.limit, offset=args.offset)
    if args.json:
        r.print_json(models.raw)
        return 0
    r.print_table(
        ["Name", "Owner", "Versions", "Labels", "Description", "Archived", "Updated"],
        [[m.name, m.owner, m.num_versions, _labels(m.labels), r.or_none(m.description),
          r.fmt_bool(m.archived), r.fmt_time(m.last_updated_time)] for m in models])
    if models.total > len(models) + args.offset:
        print(f"({len(models)} of {models.total}; see --limit and --offset)", file=sys.stderr)
    return 0


def _describe(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    client = client_from_args(args)
    model = client.get_model(args.name)
    versions = client.list_model_versions(args.name)
    if args.json:
        r.print_json({"model": model.raw, "model_versions": [v.raw for v in versions]})
        return 0
    _print_model(model)
    if versions:
        print()
        _print_versions(list(versions))
    return 0


def _register_version(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    version = client_from_args(args).register_model_version(
        args.name, args.checkpoint_uuid, name=args.version_name or "",
        comment=args.comment or "", labels=args.label or [])
    if args.json:
        r.print_json({"model_version": version.raw})
    else:
        print(f"Registered checkpoint {version.checkpoint.uuid} as {version.model_name} "
              f"version {version.version}")
    return 0


def _list_versions(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    versions = client_from_args(args).list_model_versions(args.name)
    if args.json:
        r.print_json(versions.raw)
        return 0
    _print_versions(list(versions))
    return 0


def _delete(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    if not args.yes:
        model = client.get_model(args.name)
        kept = (f" and its {model.num_versions} version(s) (their checkpoints are kept)"
                if model.num_versions else "")
        if not confirm(f"Delete model {model.name}{kept}?"):
            print("Nothing deleted.", file=sys.stderr)
            return 1
    client.delete_model(args.name)
    print(f"Deleted model {args.name}")
    return 0


def _delete_version(args: argparse.Namespace) -> int:
    client = client_from_args(args)
    if not args.yes:
        version = client.get_model_version(args.name, args.version)
        if not confirm(f"Delete {args.name} version {version.version} (checkpoint "
                       f"{version.checkpoint.uuid} is kept)?"):
            print("Nothing deleted.", file=sys.stderr)
            return 1
    client.delete_model_version(args.name, args.version)
    print(f"Deleted {args.name} version {args.version}")
    return 0


def _archiving(archive: bool) -> Any:
    def run(args: argparse.Namespace) -> int:
        from det_hub.console import render as r

        client = client_from_args(args)
        model = client.archive_model(args.name) if archive else client.unarchive_model(args.name)
        if args.json:
            r.print_json({"model": model.raw})
        else:
            print(f"Model {model.name}: {'archived' if model.archived else 'not archived'}")
        return 0

    return run


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
             json_parent: argparse.ArgumentParser) -> None:
    """Adds ``model`` (alias ``m``) and its verbs."""
    noun = subparsers.add_parser("model", aliases=["m"], help="manage the model registry")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)
    yes = argparse.ArgumentParser(add_help=False)
    yes.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    create = verbs.add_parser("create", parents=[json_parent], help="create a model")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--description", help="what the model is")
    create.add_argument("--label", action="append", metavar="LABEL",
                        help="a label (repeatable)")
    create.set_defaults(func=_create)

    listing = verbs.add_parser("list", parents=[json_parent], help="list models")
    listing.add_argument("--archived", action="store_true", help="include archived models")
    listing.add_argument("--label", help="only models with this label")
    listing.add_argument("--name", dest="name_contains", metavar="TEXT",
                         help="only models whose name holds TEXT (any case)")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    listing.add_argument("--offset", type=int, default=0, help="skip this many")
    listing.set_defaults(func=_list)

    describe = verbs.add_parser("describe", parents=[json_parent],
                                help="show a model and its versions")
    describe.add_argument("name", metavar="NAME")
    describe.set_defaults(func=_describe)

    reg = verbs.add_parser(
        "register-version", parents=[json_parent],
        help="register a checkpoint as a model's next version",
        description="Register a COMPLETED checkpoint as the model's next version. A "
        "registered checkpoint is never deleted, by GC or by hand, while a version names it.")
    reg.add_argument("name", metavar="NAME")
    reg.add_argument("checkpoint_uuid", metavar="CHECKPOINT_UUID")
    reg.add_argument("--version-name", help="a name for the version")
    reg.add_argument("--comment", help="a comment on the version")
    reg.add_argument("--label", action="append", metavar="LABEL", help="a label (repeatable)")
    reg.set_defaults(func=_register_version)

    versions = verbs.add_parser("list-versions", parents=[json_parent],
                                help="list a model's versions, newest first")
    versions.add_argument("name", metavar="NAME")
    versions.set_defaults(func=_list_versions)

    delete = verbs.add_parser("delete", parents=[yes],
                              help="delete a model and its versions (not their checkpoints)")
    delete.add_argument("name", metavar="NAME")
    delete.set_defaults(func=_delete)

    delete_version = verbs.add_parser("delete-version", parents=[yes],
                                      help="delete one version of a model (not its checkpoint)")
    delete_version.add_argument("name", metavar="NAME")
    delete_version.add_argument("version", metavar="VERSION", type=int)
    delete_version.set_defaults(func=_delete_version)

    for verb, archive, text in (("archive", True, "make a model read-only and hide it"),
                                ("unarchive", False, "make an archived model usable again")):
        action = verbs.add_parser(verb, parents=[json_parent], help=text)
        action.add_argument("name", metavar="NAME")
        action.set_defaults(func=_archiving(archive))
