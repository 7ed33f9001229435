"""``det-hub webhook``: register, list and delete webhooks (admins only)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ._connect import client_from_args

if TYPE_CHECKING:
    from det_hub.client import Webhook

HEADERS = ["ID", "Name", "Type", "URL", "Triggers"]


def _row(h: Webhook) -> list[object]:
    from det_hub.console import render as r

    return [h.id, h.name or r.NONE, h.webhook_type, h.url,
            ", ".join(str(t) for t in h.triggers) or r.NONE]


def _list(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    hooks = client_from_args(args).list_webhooks()
    if args.json:
        r.print_json(hooks.raw)
        return 0
    r.print_table(HEADERS, (_row(h) for h in hooks))
    return 0


def _create(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    hook = client_from_args(args).create_webhook(
        args.url, args.trigger, webhook_type=args.type, name=args.name, mode=args.mode)
    if args.json:
        r.print_json({"webhook": hook.raw})
        return 0
    print(f"Created webhook {hook.id}: {hook.webhook_type} to {hook.url} on "
          + ", ".join(str(t) for t in hook.triggers))
    return 0


def _delete(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    hook = client_from_args(args).delete_webhook(args.webhook_id)
    if args.json:
        r.print_json({"webhook": hook.raw})
        return 0
    print(f"Deleted webhook {hook.id} ({hook.url})")
    return 0


def _test(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    result = client_from_args(args).test_webhook(args.webhook_id)
    if args.json:
        r.print_json(result)
    elif result.get("delivered"):
        print(f"Webhook {args.webhook_id} took the test event")
    else:
        print(f"Webhook {args.webhook_id} did not take the test event: {result.get('error')}")
    return 0 if result.get("delivered") else 1


def _signing_key(args: argparse.Namespace) -> int:
    from det_hub.console import render as r

    key = client_from_args(args).webhook_signing_key()
    if args.json:
        r.print_json({"signing_key": key})
    else:
        print(key)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], json_parent: argparse.ArgumentParser) -> None:
    """Adds ``webhook`` (alias ``w``)."""
    noun = subparsers.add_parser("webhook", aliases=["w"], help="manage webhooks (admins only)")
    verbs = noun.add_subparsers(dest="verb", metavar="VERB", required=True)
    verbs.add_parser("list", parents=[json_parent], help="list webhooks").set_defaults(func=_list)

    create = verbs.add_parser(
        "create", parents=[json_parent], help="register a webhook",
        description="Register a URL the master POSTs to when one of its triggers fires: "
        "EXPERIMENT_STATE_CHANGE:STATE when an experiment reaches STATE (COMPLETED, ERROR, "
        "CANCELED, ...), CUSTOM for every alert training code sends with "
        "core_context.alert(...), CUSTOM:LEVEL for alerts of one level.")
    create.add_argument("url", metavar="URL")
    create.add_argument("--trigger", action="append", required=True, metavar="TYPE[:VALUE]",
                        help="e.g. EXPERIMENT_STATE_CHANGE:COMPLETED or CUSTOM (repeatable)")
    create.add_argument("--type", default="DEFAULT", type=str.upper, choices=["DEFAULT", "SLACK"],
                        help="DEFAULT: Determined's JSON event; SLACK: a Slack message")
    create.add_argument("--name", default="", help="a name to know it by")
    create.add_argument("--mode", default="WORKSPACE", type=str.upper,
                        choices=["WORKSPACE", "SPECIFIC"],
                        help="WORKSPACE: every experiment's events; SPECIFIC: only those of "
                        "experiments whose config names it (integrations.webhooks."
                        "webhook_name or webhook_id)")
    create.set_defaults(func=_create)

    delete = verbs.add_parser("delete", parents=[json_parent], help="delete a webhook")
    delete.add_argument("webhook_id", metavar="ID", type=int)
    delete.set_defaults(func=_delete)

    test = verbs.add_parser("test", parents=[json_parent], help="send a webhook a test event")
    test.add_argument("webhook_id", metavar="ID", type=int)
    test.set_defaults(func=_test)

    verbs.add_parser(
        "signing-key", parents=[json_parent], help="print the key deliveries are signed with",
        description="Print the key the master signs every delivery with, for receivers to "
        "check the X-Determined-AI-Signature header: the hex HMAC-SHA256, under this key, of "
        "'<X-Determined-AI-Signature-Timestamp>,<raw body>'.").set_defaults(func=_signing_key)
