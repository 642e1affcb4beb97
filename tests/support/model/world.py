"""The Redis side of the model: servers it starts itself, the faults it injects, what it reads.

``direct`` mode: a master with persistence (AOF, ``appendfsync always``), one replica of it and a
`Proxy` the processes connect through. ``sentinel`` mode: `SentinelTopology` (a master, a
replica, three Sentinels) and processes on ``from_sentinel``. Each is started once per seed run.

Whether a fault lost data is not assumed from its name: `library_state` reads every key of the
library (its logical value) before and after, and a namespace *lost* data when one of its keys
present before is missing or different after. Identity markers (a cache that expires each
second and is never replicated) are left out.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from sa_redis_ids.keys import KeySpace
from tests.support.model.proxy import Proxy
from tests.support.servers import HOST, RedisServer
from tests.support.topologies import (
    REPLICATION_ARGS,
    TEST_PERIODS,
    SentinelTopology,
    replicas_in_sync,
    wait_until,
)

PERSISTENCE = ("--appendonly", "yes", "--appendfsync", "always", "--save", "")
"""A clean restart keeps every acknowledged write: a kill -9 loses nothing."""

State = dict[str, dict[str, Any]]
"""Per namespace: key -> logical value."""


def _namespace(key: str, prefix: str) -> str | None:
    rest = key[len(prefix) + 1 :]
    if rest.startswith("{") and "}" in rest:
        return rest[1 : rest.index("}")]
    return None


def read_state(client: redis.Redis, prefix: str) -> State:
    """Every library key's logical value, by namespace (identity markers left out)."""
    found: State = {}
    for raw in client.scan_iter(match=f"{prefix}:*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        namespace = _namespace(key, prefix)
        if namespace is None or key.endswith(":identity"):
            continue
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        value: Any
        if kind == "string":
            value = client.get(key)
        elif kind == "hash":
            value = sorted(client.hgetall(key).items())
        elif kind == "set":
            value = sorted(client.smembers(key))
        elif kind == "zset":
            value = client.zrange(key, 0, -1, withscores=True)
        elif kind == "list":
            value = client.lrange(key, 0, -1)
        else:
            continue  # expired between SCAN and TYPE
        found.setdefault(namespace, {})[key] = value
    return found


def lost_namespaces(before: State, after: State) -> set[str]:
    """The namespaces with a key present before that is missing or different after."""
    lost = set()
    for namespace, keys in before.items():
        now = after.get(namespace, {})
        if any(now.get(key) != value for key, value in keys.items()):
            lost.add(namespace)
    return lost


def _data_args(*extra: str) -> list[str]:
    return [*REPLICATION_ARGS, *PERSISTENCE, *extra]


class World:
    """One topology for a seed run; `fault` injects one fault by name."""

    def __init__(self, mode: str, prefix: str):
        self.mode = mode
        self.prefix = prefix
        self.proxy: Proxy | None = None
        self.topology: SentinelTopology | None = None
        self.master: RedisServer | None = None
        self.replica: RedisServer | None = None
        self.replica_cut = False
        self.switched = False
        self.snowflake_key = KeySpace(prefix, "sf").key("snowflake")

    # -- life --------------------------------------------------------------------------------

    def start(self) -> World:
        """Start the servers; each is kept before it starts, so that `stop` stops it even when
        this start is cut short (a failure, Ctrl-C, a soak's SIGTERM)."""
        if self.mode == "sentinel":
            self.topology = SentinelTopology(periods=TEST_PERIODS)
            self.topology.start()
            return self
        self.master = RedisServer(args=_data_args())
        self.master.start()
        self.proxy = Proxy(self.master.port)
        self._new_replica()
        return self

    def _new_replica(self) -> None:
        assert self.master is not None
        args = _data_args("--replicaof", HOST, str(self.master.port))
        self.replica = RedisServer(args=args)
        self.replica.start()
        self.replica_cut = False
        master = self.master
        wait_until(lambda: replicas_in_sync(master, 1), "the model's replica in sync")

    def stop(self) -> None:
        if self.topology is not None:
            self.topology.stop()
        if self.proxy is not None:
            self.proxy.close()
        for server in (self.master, self.replica):
            if server is not None:
                server.resume()
                server.stop()
                shutil.rmtree(server.dir, ignore_errors=True)

    @property
    def target(self) -> dict[str, Any]:
        """How a worker reaches Redis (see `WorkerSpec.target`)."""
        if self.topology is not None:
            return {"sentinel": self.topology.addresses, "service": self.topology.service}
        assert self.proxy is not None
        return {"url": self.proxy.url}

    def client(self) -> redis.Redis:
        """A client of the current master (straight to it, not through the proxy)."""
        if self.topology is not None:
            return self.topology.master().client()
        assert self.master is not None
        return self.master.client()

    # -- reading -----------------------------------------------------------------------------

    def state(self) -> State:
        return read_state(self.client(), self.prefix)

    def snowflake_lead(self) -> tuple[int | None, int]:
        """How far the snowflake state's millisecond lies ahead of Redis ``TIME`` (None: no
        state), and that time (ms since 1970). ``ms`` counts from the default layout's epoch."""
        client = self.client()
        found = client.hget(self.snowflake_key, "ms")
        seconds, micros = client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        return (None if found is None else int(found) + 1_767_225_600_000 - now_ms), now_ms

    # -- faults ------------------------------------------------------------------------------

    def faults(self) -> list[str]:
        """The faults that can be injected in this mode now."""
        if self.mode == "sentinel":
            return ["flushall", "delete-key", "cut-connections"] + (
                [] if self.switched else ["sentinel-switch"]
            )
        names = ["flushall", "delete-key", "restart-empty", "restart-aof", "restart-rdb"]
        names += ["cut-connections", "promote"]
        if not self.replica_cut:
            names.append("replica-cut")
        return names

    def fault(self, name: str, rng: random.Random, key: str | None = None) -> str:
        """Inject fault ``name``; returns what was done (for the trace). ``key``: the key a
        ``delete-key`` deletes (after the prefix, e.g. ``:{seqb}:seq:node``), else a random one."""
        if key is not None:
            self.client().delete(self.prefix + key)
            return f"DEL {key}"
        action: Callable[[random.Random], str] = getattr(self, "_" + name.replace("-", "_"))
        return action(rng)

    def _flushall(self, rng: random.Random) -> str:
        self.client().flushall()
        return "FLUSHALL"

    def _delete_key(self, rng: random.Random) -> str:
        client = self.client()
        keys = sorted(k.decode() for k in client.scan_iter(match=f"{self.prefix}:*", count=1000))
        if not keys:
            return "no key to delete"
        key = rng.choice(keys)
        client.delete(key)
        return f"DEL {key[len(self.prefix) :]}"

    def _cut_connections(self, rng: random.Random) -> str:
        client = self.client()
        killed = client.client_kill_filter(_type="normal", skipme=True)
        if self.proxy is not None:
            self.proxy.cut()
        return f"CLIENT KILL TYPE normal: {killed}"

    def _restart(self, *, wipe: bool = False, rdb: bool = False) -> None:
        server = self.master
        assert server is not None
        if rdb:
            server.client().save()
        server.kill()
        if wipe:
            for path in Path(server.dir).iterdir():
                if path.name.endswith(".rdb") or path.name.startswith("appendonly"):
                    if path.is_dir():
                        shutil.rmtree(path)
                    else:
                        path.unlink()
        if rdb:  # load the snapshot (with AOF on, Redis would load the AOF instead)
            shutil.rmtree(Path(server.dir) / "appendonlydir", ignore_errors=True)
            server.args = _data_args("--appendonly", "no")
            server.start()
            client = server.client()
            client.config_set("appendonly", "yes")  # rewrites the AOF from the data
            wait_until(
                lambda: (
                    client.info("persistence")["aof_rewrite_in_progress"] == 0
                    and client.info("persistence")["aof_rewrite_scheduled"] == 0
                ),
                "the AOF rewrite after loading the snapshot",
            )
            server.args = _data_args()
        else:
            server.start()
        if self.replica is not None and not self.replica_cut:
            master = server
            wait_until(lambda: replicas_in_sync(master, 1), "the replica in sync after a restart")

    def _restart_empty(self, rng: random.Random) -> str:
        self._restart(wipe=True)
        return "kill -9, files removed, started empty"

    def _restart_aof(self, rng: random.Random) -> str:
        self._restart()
        return "kill -9, restarted from its AOF"

    def _restart_rdb(self, rng: random.Random) -> str:
        self._restart(rdb=True)
        return "SAVE, kill -9, restarted from the RDB snapshot"

    def _replica_cut(self, rng: random.Random) -> str:
        assert self.replica is not None and self.master is not None
        master = self.master
        wait_until(lambda: replicas_in_sync(master, 1), "the replica in sync before the cut")
        self.replica.client().replicaof("NO", "ONE")
        self.replica_cut = True
        return f"REPLICAOF NO ONE on the replica :{self.replica.port} (it misses what follows)"

    def _promote(self, rng: random.Random) -> str:
        assert self.replica is not None and self.master is not None and self.proxy is not None
        lagging = self.replica_cut
        if not lagging:
            self.replica.client().replicaof("NO", "ONE")
        old, self.master = self.master, self.replica
        self.proxy.switch(self.master.port)
        old.kill()
        shutil.rmtree(old.dir, ignore_errors=True)
        self.master.args = _data_args()  # its next restart: a master
        self._new_replica()
        return f"{'lagging' if lagging else 'in-sync'} replica :{self.master.port} promoted"

    def _sentinel_switch(self, rng: random.Random) -> str:
        assert self.topology is not None
        old = self.topology.master()
        client = old.client()
        client.wait(1, 2000)
        new = self.topology.failover()
        self.switched = True
        return f"SENTINEL FAILOVER :{old.port} -> :{new.port}"


def settle(seconds: float) -> None:
    """Let background work (buffer prefetch) finish before a snapshot of the state."""
    time.sleep(seconds)
