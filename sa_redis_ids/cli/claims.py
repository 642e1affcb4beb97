"""``sa-redis-ids claims show|clear NAMESPACE``: the node claims of a namespace.

Each node records, at a generator's first write, a claim per namespace and strategy:
``index/count|config`` under ``{prefix}:{{namespace}}:{strategy key}:node``. It is what stops an
application started with other options or another node list from issuing values that collide
with those already issued. ``show`` prints them; ``clear`` deletes them (and nothing else), so the
next write records the claim of whoever writes next.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sa_redis_ids.cli import probe
from sa_redis_ids.cli.options import add_redis_options
from sa_redis_ids.cli.output import add_json_option, counted, print_json
from sa_redis_ids.errors import ConfigError, RedisUnavailable
from sa_redis_ids.keys import KeySpace, validate_namespace
from sa_redis_ids.redis.scripts import reply_text

CLEAR_HELP = (
    "Delete the claim keys of NAMESPACE (every strategy's, on every node; counters, days and "
    "pools are kept) and print what was deleted. The claims are the guard against another node "
    "list or other options: with them gone, the next generator that writes records its own claim "
    "and goes on from the counters as they are. Clearing is right only when the node list or the "
    "options changed on purpose and you know no duplicate can follow: e.g. every value ever "
    "issued is in the database and the new layout cannot reach them (reseed after clearing), or "
    "the namespace's old values are gone. The danger: a node list in another order or count makes "
    "node k issue values another node already issued; another start, fmt, length or pool makes "
    "the counters mean other values; both give duplicate IDs. Every node must answer, else "
    "nothing is deleted. On a terminal it asks first; without one it needs --yes."
)

SHOW_KEYS = (
    "prefix, namespace, ok (every node answered), claims [{strategy, key_part, key, nodes "
    "[{index, name, reachable, error, claim}]}]"
)
CLEAR_KEYS = "prefix, namespace, deleted [{index, name, key, claim}], count"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "claims",
        help="show or clear the node claims of a namespace",
        description="The claims each node records for a namespace (index/count|config per "
        "strategy): what keeps an application with other options or another node list from "
        "issuing duplicates.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    actions.required = True
    show = actions.add_parser(
        "show",
        help="print each node's claims for NAMESPACE",
        description="Print the claim each node records for NAMESPACE, per strategy. Read-only. "
        "Exit status 1 when a node did not answer (the rest is printed all the same).",
    )
    show.add_argument("namespace", metavar="NAMESPACE")
    add_json_option(show, SHOW_KEYS)
    add_redis_options(show)
    show.set_defaults(run=run_show)
    clear = actions.add_parser(
        "clear", help="delete the claims of NAMESPACE (read the help first)", description=CLEAR_HELP
    )
    clear.add_argument("namespace", metavar="NAMESPACE")
    clear.add_argument("--yes", action="store_true", help="do not ask: delete at once")
    add_json_option(clear, CLEAR_KEYS)
    add_redis_options(clear)
    clear.set_defaults(run=run_clear)


def _read(args: argparse.Namespace) -> tuple[list[probe.Target], dict[str, Any]]:
    namespace = validate_namespace(args.namespace)
    found = probe.targets(args)
    keys: set[str] = set()
    for target in found:
        if probe.ping(target):
            try:
                keys.update(probe.claim_keys(target, args.prefix, namespace))
            except Exception as exc:
                target.error = probe.one_line(exc)
    claims = []
    for key in sorted(keys):
        split = probe.split_claim_key(args.prefix, key)
        if split is None:  # pragma: no cover - the pattern matched only claim keys
            continue
        chosen = probe.strategy_of_part(split[1])
        nodes = []
        for target in found:
            entry: dict[str, Any] = {
                "index": target.index,
                "name": target.name,
                "reachable": False,
                "error": target.error,
                "claim": None,
            }
            if target.client is not None and target.error is None:
                try:
                    raw = target.client.get(key)
                    entry.update(reachable=True, claim=None if raw is None else reply_text(raw))
                except Exception as exc:
                    target.error = entry["error"] = probe.one_line(exc)
            nodes.append(entry)
        claims.append(
            {
                "strategy": None if chosen is None else chosen.name,
                "key_part": split[1],
                "key": key,
                "nodes": nodes,
            }
        )
    record = {
        "prefix": args.prefix,
        "namespace": namespace,
        "ok": all(target.error is None for target in found),
        "claims": claims,
    }
    return found, record


def _down(found: list[probe.Target]) -> list[probe.Target]:
    return [target for target in found if target.error is not None]


def run_show(args: argparse.Namespace) -> int:
    found, record = _read(args)
    try:
        if args.json:
            print_json(record)
        else:
            print(render_show(record, found), flush=True)
    finally:
        probe.close(found)
    down = _down(found)
    if down:
        print(
            f"sa-redis-ids: error: {len(down)} of {len(found)} nodes did not answer: "
            + "; ".join(f"node {t.index} {t.name}: {t.error}" for t in down),
            file=sys.stderr,
        )
        return 1
    return 0


def render_show(record: dict[str, Any], found: list[probe.Target]) -> str:
    lines = [f"claims of {record['namespace']} (prefix {record['prefix']}):"]
    for target in _down(found):
        lines.append(f"  node {target.index} {target.name}: DOWN ({target.error})")
    if not record["claims"]:
        lines.append("  none: no node records a claim for this namespace")
    for claim in record["claims"]:
        name = claim["strategy"] or f"unknown strategy (key {claim['key_part']})"
        lines.append(f"  {name}: {claim['key']}")
        for entry in claim["nodes"]:
            if entry["reachable"]:
                lines.append(
                    f"    node {entry['index']} {entry['name']}: {entry['claim'] or 'no claim'}"
                )
    return "\n".join(lines)


def _confirm(prompt: str) -> bool:
    print(prompt, end="", file=sys.stderr, flush=True)
    try:
        answer = input()
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def run_clear(args: argparse.Namespace) -> int:
    if not args.yes and not _stdin_is_terminal():
        raise ConfigError(
            "claims clear deletes the guard against duplicate IDs: pass --yes to clear without "
            "a terminal to confirm on"
        )
    found, record = _read(args)
    try:
        down = _down(found)
        if down:
            raise RedisUnavailable(
                "nothing deleted: every node must answer to clear the claims; "
                + "; ".join(f"node {t.index} {t.name}: {t.error}" for t in down)
            )
        doomed = [
            (target, claim["key"], entry["claim"])
            for claim in record["claims"]
            for target, entry in zip(found, claim["nodes"], strict=True)
            if entry["claim"] is not None
        ]
        if not doomed:
            if args.json:
                print_json(_clear_record(args, []))
            else:
                print(f"no claim of {record['namespace']} on any node: nothing to delete")
            return 0
        if not args.yes:
            for target, key, claim in doomed:
                print(f"  node {target.index} {target.name}: {key} = {claim}", file=sys.stderr)
            if not _confirm(
                f"Delete {'this' if len(doomed) == 1 else 'these'} {counted(len(doomed), 'claim key')} "
                f"of {record['namespace']}? Values issued "
                "after this with another node list or other options can repeat old ones. [y/N] "
            ):
                raise ConfigError("claims clear: not confirmed; nothing deleted")
        deleted = []
        for target, key, claim in doomed:
            if probe.delete_claims(target, [key]):
                deleted.append((target, key, claim))
        # Running generators check the claim through the namespace's identity marker while it
        # stands (see claim_and_identity in common.lua): without it, each one's next call
        # checks the claim key itself.
        marker = KeySpace(args.prefix, record["namespace"]).key("identity")
        for target in found:
            probe.delete_claims(target, [marker])
        if args.json:
            print_json(_clear_record(args, deleted))
        else:
            for target, key, claim in deleted:
                print(f"deleted on node {target.index} {target.name}: {key} (was {claim})")
            print(f"{counted(len(deleted), 'claim key')} of {record['namespace']} deleted")
    finally:
        probe.close(found)
    return 0


def _clear_record(
    args: argparse.Namespace, deleted: list[tuple[probe.Target, str, str | None]]
) -> dict[str, Any]:
    return {
        "prefix": args.prefix,
        "namespace": args.namespace,
        "deleted": [
            {"index": target.index, "name": target.name, "key": key, "claim": claim}
            for target, key, claim in deleted
        ],
        "count": len(deleted),
    }


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False
