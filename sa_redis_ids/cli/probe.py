"""What ``status`` and ``claims`` read from the Redis nodes, one node at a time.

Unlike the generators, these reads never need every node: a node that cannot be reached is
reported (with its error) and the others are read all the same. Nothing here writes, except
`delete_claims`, which ``claims clear`` calls.

The nodes are those the Redis options name, in their order (node ``k`` of ``N`` issues the values
``≡ k mod N``): each ``--redis-url`` (a server, or with ``--cluster`` a whole cluster), else the
embedded in-process Redis. A namespace is found by its claim keys,
``{prefix}:{{namespace}}:{strategy key}:node``, which the first write of a generator records.
"""

from __future__ import annotations

import argparse
import contextlib
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import redis

from sa_redis_ids.cli.options import redis_urls, tls_options
from sa_redis_ids.generators.daily_code import DailyCodeGenerator
from sa_redis_ids.generators.day_counter import DatedGenerator
from sa_redis_ids.generators.day_window import label_day
from sa_redis_ids.generators.registry import Strategy, strategies
from sa_redis_ids.generators.sequence import SequenceGenerator
from sa_redis_ids.generators.short_id import ShortIdGenerator
from sa_redis_ids.generators.snowflake import SnowflakeGenerator
from sa_redis_ids.keys import KeySpace, validate_namespace, validate_prefix
from sa_redis_ids.redis.capabilities import probe
from sa_redis_ids.redis.connect import client_from_url, embedded_client
from sa_redis_ids.redis.nodes import describe_client
from sa_redis_ids.redis.refusals import refusal_of
from sa_redis_ids.redis.scripts import UNJUDGED, reply_text

CLAIM_SUFFIX = ":node"


def one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(text.split())


def hide_password(url: str) -> str:
    """``url`` with the password replaced by ``***``."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


@dataclass
class Target:
    """One node of the node list: its client, or why none could be made."""

    index: int
    url: str
    """The URL (password hidden), or ``embedded``."""
    client: Any = None
    error: str | None = None
    cluster: bool = False

    @property
    def name(self) -> str:
        if self.client is not None:
            try:
                return describe_client(self.client)
            except Exception:  # a cluster whose node list is gone: the URL says enough
                pass
        return self.url.partition("://")[2].rpartition("@")[2] or self.url

    @property
    def embedded(self) -> bool:
        return self.url == "embedded"


def targets(args: argparse.Namespace) -> list[Target]:
    """The nodes the options name; one that cannot even be connected to carries its error."""
    urls = redis_urls(args)
    if not urls:
        return [Target(0, "embedded", client=embedded_client())]
    tls = tls_options(args)
    found: list[Target] = []
    for index, url in enumerate(urls):
        target = Target(index, hide_password(url), cluster=bool(args.cluster))
        try:
            target.client = client_from_url(url, cluster=bool(args.cluster), **tls)
        except Exception as exc:  # an unreachable cluster fails here; a bad URL too
            target.error = one_line(exc)
        found.append(target)
    return found


def close(found: list[Target]) -> None:
    for target in found:
        if target.client is not None:
            with contextlib.suppress(Exception):  # closing a broken client
                target.client.close()


def ping(target: Target) -> bool:
    """Whether the node answers; its error is kept otherwise (a refusal, such as a wrong
    password, says what to fix). A ``PING`` the ACL user may not send is an answer too."""
    if target.client is None:
        return False
    try:
        target.client.ping()
    except redis.ResponseError:  # PING denied (NOPERM): the node did answer
        return True
    except Exception as exc:
        target.error = one_line(refusal_of(exc) or exc)
        return False
    return True


# -- the claim keys -------------------------------------------------------------------------


def claim_pattern(prefix: str, namespace: str | None) -> str:
    """The ``SCAN MATCH`` pattern of the claim keys (prefixes and namespaces hold no glob
    characters: their alphabets are checked)."""
    validate_prefix(prefix)
    middle = "*" if namespace is None else validate_namespace(namespace)
    return f"{prefix}:{{{middle}}}:*{CLAIM_SUFFIX}"


def split_claim_key(prefix: str, key: str) -> tuple[str, str] | None:
    """``(namespace, strategy key part)`` of a claim key, or None if it is not one."""
    head = f"{prefix}:{{"
    if not key.startswith(head) or not key.endswith(CLAIM_SUFFIX):
        return None
    namespace, sep, rest = key[len(head) :].partition("}:")
    part = rest[: -len(CLAIM_SUFFIX)]
    if not sep or not part or ":" in part:
        return None
    try:
        validate_namespace(namespace)
    except ValueError:
        return None
    return namespace, part


def claim_keys(target: Target, prefix: str, namespace: str | None) -> list[str]:
    """The claim keys on one node (every primary of a cluster), sorted."""
    pattern = claim_pattern(prefix, namespace)
    return sorted({reply_text(key) for key in target.client.scan_iter(match=pattern, count=1000)})


def strategy_of_part(part: str) -> Strategy | None:
    """The registered strategy whose keys use ``part`` (``seq``, ``dp``…), if any."""
    return next((each for each in strategies() if each.key_part == part), None)


# -- one server's settings ------------------------------------------------------------------


PERSISTENCE_FIELDS = (
    "loading",
    "rdb_changes_since_last_save",
    "rdb_last_save_time",
    "rdb_last_bgsave_status",
    "aof_enabled",
    "aof_last_write_status",
)


@dataclass
class Server:
    """One Redis server of a node (a cluster has several) and the settings that matter for IDs."""

    address: str
    reachable: bool = True
    error: str | None = None
    maxmemory_policy: str | None = None
    save: str | None = None
    appendonly: str | None = None
    persistence: dict[str, Any] = field(default_factory=dict)
    role: str | None = None
    connected_replicas: int | None = None
    notes: list[str] = field(default_factory=list)
    """Settings that could not be read (``CONFIG`` disabled on a managed Redis…)."""
    about: str | None = None
    """What the server is, when it has no settings to read (the embedded Redis)."""
    server: str | None = None
    """Its flavour and version (``redis 7.2.4``, ``valkey 8.1.1``), from ``HELLO``."""
    capabilities: dict[str, Any] | None = None
    """What the library may rely on there (`Capabilities.summary`)."""
    lost: list[str] = field(default_factory=list)
    """The guarantees the library cannot give there, each naming the command it lacks and what
    that costs (see `sa_redis_ids.redis.capabilities`)."""


def _config_get(client: Any, name: str, server: Server) -> str | None:
    try:
        found = client.config_get(name)
    except Exception as exc:
        server.notes.append(f"CONFIG GET {name}: {one_line(exc)}")
        return None
    value = found.get(name) if isinstance(found, dict) else None
    return None if value is None else reply_text(value)


def _info(client: Any, section: str, server: Server) -> dict[str, Any]:
    try:
        found = client.info(section)
    except Exception as exc:
        server.notes.append(f"INFO {section}: {one_line(exc)}")
        return {}
    return dict(found) if isinstance(found, dict) else {}


EMBEDDED_ABOUT = (
    "the in-process Redis of this command: empty at every start, no persistence, no replicas, "
    "no eviction, no settings to read; pass --redis-url to see a server"
)
"""What ``status`` says of the embedded Redis (it answers no CONFIG or INFO)."""


def read_server(address: str, client: Any) -> Server:
    """The settings of one server; an error leaves it marked unreachable."""
    server = Server(address)
    try:
        client.ping()
    except redis.ResponseError as exc:  # PING denied (NOPERM): the server did answer
        server.notes.append(f"PING: {one_line(exc)}")
    except Exception as exc:
        server.reachable, server.error = False, one_line(refusal_of(exc) or exc)
        return server
    try:
        found = probe(client, address)
    except Exception as exc:
        server.notes.append(f"capabilities: {one_line(exc)}")
    else:
        server.capabilities = found.summary()
        version = server.capabilities["version"]
        server.server = f"{found.flavour} {version}" if version else found.flavour
        server.lost = [lost.short() for lost in found.lost]
    server.maxmemory_policy = _config_get(client, "maxmemory-policy", server)
    if server.maxmemory_policy is None and server.capabilities is not None:
        server.maxmemory_policy = found.eviction_policies.get(address)  # from INFO memory
    server.save = _config_get(client, "save", server)
    server.appendonly = _config_get(client, "appendonly", server)
    persistence = _info(client, "persistence", server)
    server.persistence = {k: persistence[k] for k in PERSISTENCE_FIELDS if k in persistence}
    replication = _info(client, "replication", server)
    if replication:
        server.role = str(replication.get("role")) if "role" in replication else None
        replicas = replication.get("connected_slaves")
        server.connected_replicas = None if replicas is None else int(replicas)
    return server


def servers_of(target: Target) -> list[Server]:
    """The servers of a node: itself, or each node (primaries and replicas) of a cluster."""
    if target.client is None:
        return [Server(target.name, reachable=False, error=target.error)]
    if target.embedded:
        return [Server("embedded", about=EMBEDDED_ABOUT)]
    if hasattr(target.client, "get_nodes"):
        return [
            read_server(f"{node.host}:{node.port}", node.redis_connection)
            for node in target.client.get_nodes()
            if node.redis_connection is not None
        ]
    return [read_server(target.name, target.client)]


# -- counters of one namespace and strategy on one node -------------------------------------


def _int(value: Any) -> int | None:
    return None if value is None else int(reply_text(value))


def parse_claim(claim: str | None) -> tuple[int, int, str] | None:
    """``(index, count, config)`` of a recorded claim ``index/count|config`` (a claim recorded
    before the floor could be read carries a suffix, see `UNJUDGED`)."""
    if claim is None:
        return None
    head, sep, config = claim.removesuffix(UNJUDGED).partition("|")
    index, slash, count = head.partition("/")
    if not sep or not slash or not index.isdigit() or not count.isdigit():
        return None
    return int(index), int(count), config


def _config_options(config: str) -> dict[str, str]:
    """``name=value`` parts of a recorded config, as text."""
    rest = config.partition(":")[2]
    found: dict[str, str] = {}
    for part in rest.replace(",", ":").split(":") if rest else []:
        name, sep, value = part.partition("=")
        if sep:
            found[name] = value
    return found


def counters(
    client: Any, prefix: str, namespace: str, chosen: Strategy | None, claim: str | None
) -> dict[str, Any]:
    """What one node holds of a namespace's strategy, by the kind of its generator class:

    * a sequence: ``counter`` (the node's counter, None: none yet);
    * date-keyed: ``days`` (the days with a counter) and ``purged_through`` (the purge marker);
    * a snowflake: ``last_ms`` and ``last_slot`` (of the last ID issued) and ``last_time``;
    * a pool: ``taken`` (bits set), ``share`` (the node's share of the pool) and ``fill``.
    """
    kind = None if chosen is None else chosen.generator
    part = None if chosen is None else chosen.key_part
    if kind is None or part is None:
        return {}
    keys = KeySpace(prefix, namespace)
    if issubclass(kind, SequenceGenerator):
        return {"counter": _int(client.get(keys.key(part)))}
    if issubclass(kind, DatedGenerator):
        if issubclass(kind, DailyCodeGenerator) or kind.storage == "key":
            store = keys.key(part, "days")
            labels = [reply_text(label) for label in client.smembers(store)]
            labels = [label for label in labels if client.exists(keys.key(part, label))]
        else:
            labels = [reply_text(label) for label in client.hkeys(keys.key(part))]
        days = []
        for label in sorted(labels):
            try:
                days.append(label_day(label).isoformat())
            except ValueError:
                continue
        marker = client.get(keys.key(part, "purged"))
        purged = None if marker is None else label_day(reply_text(marker)).isoformat()
        return {"days": days, "purged_through": purged}
    if issubclass(kind, SnowflakeGenerator):
        ms, slot = client.hmget(keys.key(part), ["ms", "c"])
        last_ms, last_slot = _int(ms), _int(slot)
        when = None
        parsed = parse_claim(claim)
        epoch = _config_options(parsed[2]).get("epoch_ms") if parsed else None
        if last_ms is not None and epoch is not None and epoch.lstrip("-").isdigit():
            start = datetime(1970, 1, 1, tzinfo=timezone.utc)
            when = (start + timedelta(milliseconds=int(epoch) + last_ms)).isoformat()
        return {"last_ms": last_ms, "last_slot": last_slot, "last_time": when}
    if issubclass(kind, ShortIdGenerator):
        taken = int(client.bitcount(keys.key(part)))
        parsed = parse_claim(claim)
        share = None
        if parsed is not None:
            index, count, config = parsed
            size = _config_options(config).get("pool_size", "")
            if size.isdigit() and count > 0:
                share = max(0, (int(size) - 1 - index) // count + 1)
        fill = taken / share if share else None
        return {"taken": taken, "share": share, "fill": fill}
    return {}


def delete_claims(target: Target, keys: list[str]) -> int:
    """Delete ``keys`` on one node, one by one (a cluster routes each by its slot)."""
    return sum(int(target.client.delete(key)) for key in keys)
