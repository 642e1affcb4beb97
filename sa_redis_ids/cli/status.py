"""``sa-redis-ids status [NAMESPACE]``: what the Redis nodes hold, and how they are set up.

For every namespace found under the key prefix (by its claim keys) or the one given: each
strategy, the claim every node records, and the node's counters (see
`sa_redis_ids.cli.probe.counters`). For every node: whether it answers (with the error when
it does not), its flavour and version, its ``maxmemory-policy`` (``CONFIG GET``, else ``INFO
memory``), persistence (``CONFIG GET save``/``appendonly``, ``INFO persistence``), replication
(``INFO replication``: role, connected replicas) and the guarantees the library cannot give there
for want of a command (`sa_redis_ids.redis.capabilities`); for a cluster, each of its servers.
Nothing is written. A node that is down is reported; the others are read all the same.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import Any

from sa_redis_ids.cli import probe
from sa_redis_ids.cli.options import add_redis_options
from sa_redis_ids.cli.output import add_json_option, print_json
from sa_redis_ids.errors import ConfigError
from sa_redis_ids.keys import validate_namespace
from sa_redis_ids.redis.scripts import reply_text

REFUSED = f"{ConfigError.__name__}: "
"""How the error of a node that refused the command's user begins (see `probe.ping`)."""

JSON_KEYS = (
    "prefix, ok (every node answered), nodes [{index, name, url, reachable, error, servers "
    "[{address, reachable, error, maxmemory_policy, save, appendonly, persistence {…INFO "
    "persistence fields}, role, connected_replicas, notes, about, server, capabilities {flavour, "
    "version, identity, info_memory, config_get, wait, script_time, waitaof, aof, lost, "
    "refused}, lost}]}], namespaces [{namespace, "
    "strategies [{strategy, key_part, config, consistent, pool_size, taken, fill, nodes [{index, "
    "name, reachable, error, claim, counters {counter | days, purged_through | last_ms, "
    "last_slot, last_time | taken, share, fill}}]}]}]"
)


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "status",
        help="show the namespaces, claims and counters on the nodes, and the nodes' settings",
        description="Show, for every namespace found under the key prefix on the nodes (by its "
        "claim keys) or just NAMESPACE: each strategy, the claim each node records, and its "
        "counters per node (a sequence's counter; a date-keyed strategy's days present and purge "
        "marker; a snowflake's last millisecond and slot; a short_id pool's fill, bits set / "
        "pool size). For each node: whether it answers (and the error if not), maxmemory-policy, "
        "persistence (save, appendonly, INFO persistence), replication (role, connected "
        "replicas), and the guarantees the library cannot give there for want of a command "
        "(INFO or CONFIG renamed or denied); for a cluster, each of its servers. Read-only. "
        "A node that is down is reported, the others read. Exit status: 0 when every node "
        "answered, 1 when one did not (the report is printed all the same). The embedded Redis "
        "(no --redis-url) lives in the "
        "command's process and is empty at every start: status there says so and shows no "
        "namespaces.",
    )
    parser.add_argument("namespace", metavar="NAMESPACE", nargs="?", help="only this namespace")
    add_json_option(parser, JSON_KEYS)
    add_redis_options(parser)
    parser.set_defaults(run=run)


def gather(args: argparse.Namespace) -> dict[str, Any]:
    """The whole report as a JSON-ready dict (see `JSON_KEYS`)."""
    namespace = None if args.namespace is None else validate_namespace(args.namespace)
    found = probe.targets(args)
    try:
        return _gather(found, args.prefix, namespace)
    finally:
        probe.close(found)


def _gather(found: list[probe.Target], prefix: str, namespace: str | None) -> dict[str, Any]:
    nodes: list[dict[str, Any]] = []
    reachable: list[probe.Target] = []
    keys_by_node: dict[int, list[str]] = {}
    for target in found:
        up = probe.ping(target)
        servers = probe.servers_of(target) if target.client is not None else []
        if up:
            try:
                keys_by_node[target.index] = probe.claim_keys(target, prefix, namespace)
                reachable.append(target)
            except Exception as exc:
                up, target.error = False, probe.one_line(exc)
        if not servers:
            servers = [probe.Server(target.name, reachable=False, error=target.error)]
        nodes.append(
            {
                "index": target.index,
                "name": target.name,
                "url": target.url,
                "reachable": up,
                "error": None if up else target.error,
                "servers": [asdict(server) for server in servers],
            }
        )
    parts: dict[str, set[str]] = {}
    for keys in keys_by_node.values():
        for key in keys:
            split = probe.split_claim_key(prefix, key)
            if split is not None:
                parts.setdefault(split[0], set()).add(split[1])
    if namespace is not None:
        parts.setdefault(namespace, set())
    namespaces = [
        {
            "namespace": ns,
            "strategies": [_strategy(found, prefix, ns, part) for part in sorted(parts[ns])],
        }
        for ns in sorted(parts)
    ]
    return {
        "prefix": prefix,
        "ok": all(node["reachable"] for node in nodes),
        "nodes": nodes,
        "namespaces": namespaces,
    }


def _strategy(found: list[probe.Target], prefix: str, ns: str, part: str) -> dict[str, Any]:
    chosen = probe.strategy_of_part(part)
    claim_key = f"{prefix}:{{{ns}}}:{part}{probe.CLAIM_SUFFIX}"
    per_node: list[dict[str, Any]] = []
    for target in found:
        entry: dict[str, Any] = {
            "index": target.index,
            "name": target.name,
            "reachable": False,
            "error": target.error,
            "claim": None,
            "counters": {},
        }
        if target.client is not None and target.error is None:
            try:
                raw = target.client.get(claim_key)
                claim = None if raw is None else reply_text(raw)
                entry["claim"] = claim
                entry["counters"] = probe.counters(target.client, prefix, ns, chosen, claim)
                entry["reachable"], entry["error"] = True, None
            except Exception as exc:
                entry["error"] = probe.one_line(exc)
        per_node.append(entry)
    parsed = [probe.parse_claim(entry["claim"]) for entry in per_node if entry["claim"]]
    configs = sorted({each[2] for each in parsed if each is not None})
    count = len(found)
    consistent = len(configs) <= 1 and all(
        (parsed_claim := probe.parse_claim(entry["claim"])) is not None
        and parsed_claim[:2] == (entry["index"], count)
        for entry in per_node
        if entry["claim"]
    )
    record: dict[str, Any] = {
        "strategy": chosen.name if chosen is not None else None,
        "key_part": part,
        "config": configs[0] if len(configs) == 1 else (configs or None),
        "consistent": consistent,
        "pool_size": None,
        "taken": None,
        "fill": None,
        "nodes": per_node,
    }
    if configs and any("taken" in entry["counters"] for entry in per_node):
        size = probe._config_options(configs[0]).get("pool_size", "")
        if size.isdigit():
            taken = sum(entry["counters"].get("taken") or 0 for entry in per_node)
            record.update(pool_size=int(size), taken=taken, fill=taken / int(size))
    return record


# -- text -------------------------------------------------------------------------------------


def _yes(value: Any) -> str:
    return "-" if value is None else str(value)


def _server_line(server: dict[str, Any]) -> str:
    if not server["reachable"]:
        return f"{server['address']}: DOWN ({server['error']})"
    if server["about"]:
        return f"{server['address']}: {server['about']}"
    persistence = server["persistence"]
    saves = "off" if server["save"] in (None, "") else f'"{server["save"]}"'
    aof = _yes(server["appendonly"])
    bgsave = persistence.get("rdb_last_bgsave_status")
    unsaved = persistence.get("rdb_changes_since_last_save")
    parts = [
        f"maxmemory-policy {_yes(server['maxmemory_policy'])}",
        f"save {saves}, appendonly {aof}"
        + (f", last bgsave {bgsave}" if bgsave is not None else "")
        + (f", {unsaved} changes unsaved" if unsaved is not None else ""),
        f"role {_yes(server['role'])}, {_yes(server['connected_replicas'])} replicas",
    ]
    if server["server"]:
        parts.insert(0, server["server"])
    text = f"{server['address']}: " + "; ".join(parts)
    if server["notes"]:
        text += f" (not read: {'; '.join(server['notes'])})"
    for lost in server["lost"]:
        text += f"\n      LOST {lost}"
    return text


def _counters_text(counters: dict[str, Any]) -> str:
    if "counter" in counters:
        return f"counter {_yes(counters['counter'])}"
    if "days" in counters:
        days = counters["days"]
        shown = (
            "none"
            if not days
            else (", ".join(days) if len(days) <= 4 else f"{days[0]} … {days[-1]}")
        )
        return (
            f"{len(days)} days ({shown}); purged through {counters['purged_through'] or 'nothing'}"
        )
    if "last_ms" in counters:
        if counters["last_ms"] is None:
            return "no ID yet"
        return (
            f"last ms {counters['last_ms']} ({counters['last_time'] or '?'}), "
            f"slot {counters['last_slot']}"
        )
    if "taken" in counters:
        fill = counters["fill"]
        share = _yes(counters["share"])
        return f"{counters['taken']} of {share} taken" + (
            f" ({fill:.2%})" if fill is not None else ""
        )
    return ""


def render(report: dict[str, Any]) -> str:
    lines = [f"nodes (prefix {report['prefix']}):"]
    for node in report["nodes"]:
        state = "up" if node["reachable"] else f"DOWN: {node['error']}"
        lines.append(f"  node {node['index']} {node['name']}: {state}")
        if node["reachable"] or len(node["servers"]) > 1:
            lines.extend(f"    {_server_line(server)}" for server in node["servers"])
    if not report["namespaces"]:
        lines.append("namespaces: none found (no claim keys under this prefix)")
    else:
        lines.append("namespaces:")
    for ns in report["namespaces"]:
        if not ns["strategies"]:
            lines.append(f"  {ns['namespace']}: no node records a claim")
            continue
        for each in ns["strategies"]:
            name = each["strategy"] or f"unknown strategy (key {each['key_part']})"
            config = each["config"]
            shown = config if isinstance(config, str) or config is None else " / ".join(config)
            lines.append(f"  {ns['namespace']} [{name}] {shown or 'no claim'}")
            if not each["consistent"]:
                lines.append(
                    "    WARNING: the claims disagree with each other or with this node list "
                    "(its order or count)"
                )
            if each["fill"] is not None:
                lines.append(
                    f"    pool: {each['taken']} of {each['pool_size']} taken ({each['fill']:.2%})"
                )
            for entry in each["nodes"]:
                if not entry["reachable"]:
                    lines.append(f"    node {entry['index']} {entry['name']}: DOWN")
                    continue
                claim = entry["claim"] or "no claim"
                counters = _counters_text(entry["counters"])
                lines.append(
                    f"    node {entry['index']} {entry['name']}: claim {claim}"
                    + (f"; {counters}" if counters else "")
                )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    report = gather(args)
    if args.json:
        print_json(report)
    else:
        print(render(report), flush=True)
    if not report["ok"]:
        nodes = report["nodes"]
        down = [node for node in nodes if not node["reachable"]]
        refused = [node for node in down if str(node["error"]).startswith(REFUSED)]
        for node in refused:  # a password, a permission, TLS: what to fix
            print(f"sa-redis-ids: error: node {node['index']}: {node['error']}", file=sys.stderr)
        silent = [str(node["index"]) for node in down if node not in refused]
        if silent:
            print(
                f"sa-redis-ids: error: {len(silent)} of {len(nodes)} nodes did not answer "
                f"(node {', '.join(silent)})",
                file=sys.stderr,
            )
        return 1
    return 0
