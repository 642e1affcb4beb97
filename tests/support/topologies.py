"""Replicated Redis topologies for tests: a master with replicas, Sentinel, a Cluster with replicas.

Everything runs on free loopback ports in a temporary directory; every process is stopped by its
own process id and the directory is removed. Timeouts are short so a failover completes in a few
seconds: Sentinel ``down-after-milliseconds`` 1000 and ``failover-timeout`` 3000, Cluster
``cluster-node-timeout`` 1000. Waiting is done by polling with deadlines, never by fixed sleeps.
Tests shorten Sentinel's fixed periods (:data:`TEST_PERIODS`); benchmarks keep Sentinel's own.

- :class:`ReplicatedPair`: one master and its replicas (``WAIT`` tests, benchmarks).
- :class:`SentinelTopology`: a master, one replica and three Sentinels (``quorum 2``), with
  ``master()``, ``replicas()``, ``failover()`` (the old master stays writable until Sentinel
  demotes it, as in production: ``wait_demoted()``), ``kill_master()`` and ``stop()``.
- :class:`ReplicatedCluster`: a 6-node Cluster (3 masters, 3 replicas) with ``kill_master()``.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from tests.support.servers import HOST, RedisServer, create_cluster, free_port, stop_process
from tests.support.services import require_binary

#: Options of every data node: a replica resyncs at once instead of waiting 5 s for more replicas.
REPLICATION_ARGS = ("--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1")
SERVICE = "sa_redis_ids_test"

SENTINEL_PERIODS = {"info-period": 10_000, "publish-period": 2_000}
"""Sentinel's own fixed periods (ms): ``INFO`` to each replica every 10 s; hello messages every
2 s, and a server that still acts as master while listed as a replica is demoted only 4 periods
(8 s) after Sentinel first listed it so, at its next ``INFO``: some 8 to 18 s after a
switch-over."""
TEST_PERIODS = {"info-period": 2_000, "publish-period": 1_000}
"""What the tests' Sentinels use (``SENTINEL DEBUG``): the old master stays writable some 4 to 6 s
after a switch-over instead of 8 to 18 s, the same window, shorter; Sentinels find each other in a
second. Nothing else changes (the failover itself, down-after, the demotion's ``CLIENT KILL``)."""


def wait_until(condition: Callable[[], Any], what: str, *, timeout: float = 20.0) -> Any:
    """Poll ``condition`` until it returns something truthy (errors count as "not yet")."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = condition()
        except (redis.RedisError, OSError):
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def _info(server: RedisServer, section: str = "replication") -> dict[str, Any]:
    info: dict[str, Any] = server.client().info(section)
    return info


def replicas_in_sync(server: RedisServer, count: int) -> bool:
    """Whether ``count`` replicas of ``server`` acknowledge its writes now (``WAIT`` as the probe:
    a replica the master calls ``online`` may still be loading the snapshot and not answer yet)."""
    client = server.client()
    if int(client.info("replication").get("connected_slaves", 0)) < count:
        return False
    return int(client.wait(count, 200)) >= count


class ReplicatedPair:
    """A master and ``replicas`` replicas of it (``replicaof``), without Sentinel."""

    def __init__(self, replicas: int = 1):
        self.dir = Path(tempfile.mkdtemp(prefix="sa_redis_ids_pair_"))
        self.master = RedisServer(directory=self.dir, args=REPLICATION_ARGS)
        self.replicas: list[RedisServer] = []
        self._count = replicas

    def start(self) -> ReplicatedPair:
        """Start the servers; each is listed before it starts, so that `stop` stops it even
        when this start is cut short (a failure, Ctrl-C, SIGTERM)."""
        self.master.start()
        for _ in range(self._count):
            replica = RedisServer(
                directory=self.dir,
                args=[*REPLICATION_ARGS, "--replicaof", HOST, str(self.master.port)],
            )
            self.replicas.append(replica)
            replica.start()
        self.wait_in_sync()
        return self

    def wait_in_sync(self, count: int | None = None) -> None:
        """Wait until ``count`` (default: all) replicas are connected and in sync."""
        needed = len(self.replicas) if count is None else count
        wait_until(lambda: replicas_in_sync(self.master, needed), f"{needed} replicas in sync")

    def stop(self) -> None:
        for server in [*self.replicas, self.master]:
            server.resume()  # a paused process cannot act on SIGTERM
            server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class SentinelServer:
    """One ``redis-server FILE --sentinel`` process monitoring one master."""

    def __init__(
        self,
        directory: Path,
        master_port: int,
        *,
        quorum: int = 2,
        periods: dict[str, int] | None = None,
    ):
        self.port = free_port()
        self.dir = directory
        self.config = directory / f"sentinel-{self.port}.conf"
        self.master_port = master_port
        self.quorum = quorum
        self.periods = dict(periods or {})
        """``SENTINEL DEBUG`` periods (ms) set right after each start; none: Sentinel's own."""
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def client(self) -> redis.Redis:
        return redis.Redis(host=HOST, port=self.port, socket_timeout=5, decode_responses=True)

    def start(self) -> SentinelServer:
        # Sentinel rewrites its config file (known replicas, peers, epochs): it must be its own file.
        self.config.write_text(
            "\n".join(
                [
                    f"port {self.port}",
                    f"bind {HOST}",
                    f"dir {self.dir}",
                    f"logfile {self.dir / f'sentinel-{self.port}.log'}",
                    f"sentinel monitor {SERVICE} {HOST} {self.master_port} {self.quorum}",
                    f"sentinel down-after-milliseconds {SERVICE} 1000",
                    f"sentinel failover-timeout {SERVICE} 3000",
                    f"sentinel parallel-syncs {SERVICE} 1",
                    "",
                ]
            ),
            encoding="utf-8",
        )
        binary = require_binary("redis-server")
        self.process = subprocess.Popen(
            [binary, str(self.config), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self.client().ping, f"sentinel on port {self.port}", timeout=10)
        if self.periods:
            settings = [str(word) for pair in self.periods.items() for word in pair]
            self.client().execute_command("SENTINEL", "DEBUG", *settings)
        return self

    def master_port_now(self) -> int:
        """The port of the master this sentinel names now."""
        _host, port = self.client().sentinel_get_master_addr_by_name(SERVICE)
        return int(port)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        stop_process(self.process)
        self.process = None


class SentinelTopology:
    """A master, one replica and three Sentinels (quorum 2) on loopback, for ``service``.

    ``periods``: Sentinel's fixed periods, :data:`SENTINEL_PERIODS` as in production unless
    given (the tests give :data:`TEST_PERIODS`)."""

    service = SERVICE

    def __init__(self, *, sentinels: int = 3, periods: dict[str, int] | None = None):
        self.dir = Path(tempfile.mkdtemp(prefix="sa_redis_ids_sentinel_"))
        self.pair = ReplicatedPair(replicas=1)
        self.servers: list[RedisServer] = []
        self.sentinels: list[SentinelServer] = []
        self._sentinel_count = sentinels
        self.periods = dict(periods or SENTINEL_PERIODS)

    @property
    def addresses(self) -> list[str]:
        """The sentinels as ``"host:port"`` strings (what ``RedisIds.from_sentinel`` takes)."""
        return [sentinel.address for sentinel in self.sentinels]

    def start(self) -> SentinelTopology:
        """Start the servers and Sentinels; each is listed before it starts, so that `stop`
        stops it even when this start is cut short (a failure, Ctrl-C, SIGTERM)."""
        self.pair.start()
        self.servers = [self.pair.master, *self.pair.replicas]
        for _ in range(self._sentinel_count):
            sentinel = SentinelServer(self.dir, self.pair.master.port, periods=self.periods)
            self.sentinels.append(sentinel)
            sentinel.start()
        others = self._sentinel_count - 1
        # Ready when every sentinel knows the replica and its peers (needed to agree on a failover).

        def ready() -> bool:
            for sentinel in self.sentinels:
                state = sentinel.client().sentinel_master(SERVICE)
                if state["num-slaves"] < 1 or state["num-other-sentinels"] < others:
                    return False
            return True

        wait_until(ready, "sentinels to discover the replica and each other")
        return self

    def _server(self, port: int) -> RedisServer:
        return next(server for server in self.servers if server.port == port)

    def _named_port(self) -> int:
        for sentinel in self.sentinels:
            try:
                return sentinel.master_port_now()
            except redis.RedisError:
                continue
        raise RuntimeError("no sentinel answered")

    def master(self) -> RedisServer:
        """The server the sentinels name as master now."""
        return self._server(self._named_port())

    def replicas(self) -> list[RedisServer]:
        """The running servers that are not the master."""
        master = self.master()
        return [server for server in self.servers if server is not master and server.running]

    def failover(self) -> RedisServer:
        """``SENTINEL FAILOVER``; wait until every sentinel names the new master and it acts as
        one; return it. The old master is left to Sentinel, as in production.

        Sentinel promotes the replica at once but demotes the old master only when a periodic
        ``INFO`` (every 10 s by default, ``info-period``) shows it still acting as master, some 4
        hello periods (8 s by default) after Sentinel listed it as a replica: for that window
        (:data:`SENTINEL_PERIODS`; 4 to 6 s with :data:`TEST_PERIODS`) the old master takes
        writes the new one never sees, and every connection already open to it (pooled or held)
        can make them. :meth:`wait_demoted` waits it out.
        """
        self.wait_settled()
        old = self.master()
        deadline = time.monotonic() + 60
        while True:
            # Sentinel refuses (NOGOODSLAVE) until its last INFO of the replica is recent enough,
            # which its INFO period for replicas does not always make it: ask until it accepts.
            wait_until(
                lambda: self.sentinels[0].client().sentinel_failover(SERVICE),
                "Sentinel to accept the failover",
            )
            try:
                return self._wait_new_master(old, timeout=15)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                if self._named_port() != old.port:  # under way: the other sentinels follow
                    return self._wait_new_master(old, timeout=deadline - time.monotonic() + 1)
                # A forced failover whose promotion outlasts failover-timeout (a loaded machine)
                # is aborted and not tried again: ask again, as an operator would.

    def wait_settled(self) -> None:
        """Wait until every running Sentinel names the same master and has seen each running
        replica report itself a replica of it.

        Right after a demotion a Sentinel may still hold an ``INFO`` in which the old master
        called itself master; a switch-over that promotes that server before the Sentinel's next
        ``INFO`` of it has that Sentinel take the new master for the stale one and demote it at
        once. A switch-over here starts from a topology every Sentinel sees as it is, as an
        operator's or a failure's would on a steady production topology."""

        def settled() -> bool:
            running = [sentinel for sentinel in self.sentinels if sentinel.running]
            ports = {sentinel.master_port_now() for sentinel in running}
            if len(ports) != 1:
                return False
            (master,) = ports
            replicas = {s.port for s in self.servers if s.running and s.port != master}
            for sentinel in running:
                seen = {
                    entry["port"]
                    for entry in sentinel.client().sentinel_slaves(SERVICE)
                    if entry["role-reported"] == "slave" and entry["master-port"] == master
                }
                if not replicas <= seen:
                    return False
            return True

        wait_until(settled, "every Sentinel to see the topology as it is")

    def is_master(self, server: RedisServer) -> bool:
        """Whether ``server`` acts as a master now (takes writes)."""
        return bool(server.running and _info(server)["role"] == "master")

    def wait_demoted(self, old: RedisServer, *, timeout: float = 40.0) -> None:
        """Wait until Sentinel itself has turned ``old`` into a replica of the current master and
        the link is up (the window of :meth:`failover`; longer on a loaded machine)."""
        wait_until(
            lambda: (
                (info := _info(old))["role"] == "slave" and info.get("master_link_status") == "up"
            ),
            "Sentinel to demote the old master",
            timeout=timeout,
        )

    def kill_master(self) -> RedisServer:
        """SIGKILL the master and wait until the sentinels promote its replica; return it."""
        self.wait_settled()
        old = self.master()
        old.kill()
        return self._wait_new_master(old)

    def wait_master_other_than(self, old: RedisServer) -> RedisServer:
        """Wait until every sentinel names a master other than ``old``; return it."""
        return self._wait_new_master(old)

    def _wait_new_master(self, old: RedisServer, *, timeout: float = 20.0) -> RedisServer:
        def promoted() -> RedisServer | None:
            ports = {sentinel.master_port_now() for sentinel in self.sentinels}
            if len(ports) != 1 or old.port in ports:
                return None
            new = self._server(ports.pop())
            return new if _info(new)["role"] == "master" else None

        found: RedisServer = wait_until(
            promoted, "the sentinels to promote a new master", timeout=timeout
        )
        return found

    def wait_replicas_in_sync(self, count: int = 1) -> None:
        """Wait until the current master has ``count`` replicas in sync (after a failover, the old
        master rejoins as a replica once the sentinels reconfigure it)."""
        wait_until(
            lambda: replicas_in_sync(self.master(), count),
            f"{count} replicas of the new master",
            timeout=40,  # Sentinel demotes an old master only some seconds after a switch-over
        )

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        self.pair.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


CREATE_NODE_TIMEOUT_MS = 5000
"""A test cluster's node timeout while it is created (see `ReplicatedCluster`)."""


class ReplicatedCluster:
    """A Redis Cluster of 3 masters and 3 replicas (``--cluster-replicas 1``) on loopback."""

    def __init__(self, *, masters: int = 3, node_timeout_ms: int = 1000):
        self.dir = Path(tempfile.mkdtemp(prefix="sa_redis_ids_rcluster_"))
        self._node_timeout_ms = node_timeout_ms
        args = [
            *REPLICATION_ARGS,
            # Created with a node timeout long enough that a busy machine (a parallel run, a
            # saturated CPU) cannot make a node miss it and set off a failover before the
            # cluster is whole; the timeout the tests want is set once it is (`start`).
            "--cluster-node-timeout",
            str(max(node_timeout_ms, CREATE_NODE_TIMEOUT_MS)),
            "--cluster-replica-validity-factor",
            "0",  # a replica may always take over, however long its link was down
        ]
        self.servers = [
            RedisServer(cluster=True, directory=self.dir, args=args) for _ in range(masters * 2)
        ]
        self._masters = masters

    @property
    def url(self) -> str:
        return next(server for server in self.servers if server.running).url

    def start(self) -> ReplicatedCluster:
        create_cluster(self.servers, replicas=1)
        self.wait_healthy()
        for server in self.servers:
            server.client().config_set("cluster-node-timeout", self._node_timeout_ms)
        return self

    def _roles(self) -> dict[int, tuple[str, str, str]]:
        """``port -> (node id, "master"/"replica", master id)`` from a running node's view."""
        live = next(server for server in self.servers if server.running)
        roles: dict[int, tuple[str, str, str]] = {}
        text = live.client().execute_command("CLUSTER", "NODES")
        lines = text.decode() if isinstance(text, bytes) else str(text)
        for line in lines.splitlines():
            fields = line.split()
            port = int(fields[1].split("@", 1)[0].rsplit(":", 1)[1])
            flags = fields[2].split(",")
            if "fail" in flags or "fail?" in flags:
                continue
            role = "master" if "master" in flags else "replica"
            roles[port] = (fields[0], role, fields[3])
        return roles

    def masters(self) -> list[RedisServer]:
        roles = self._roles()
        return [
            s for s in self.servers if s.running and roles.get(s.port, ("", "", ""))[1] == "master"
        ]

    def replicas(self) -> list[RedisServer]:
        roles = self._roles()
        return [
            s for s in self.servers if s.running and roles.get(s.port, ("", "", ""))[1] == "replica"
        ]

    def wait_healthy(self) -> None:
        """Wait for ``cluster_state:ok`` on every running node and one in-sync replica per master."""

        def healthy() -> bool:
            running = [server for server in self.servers if server.running]
            if any(s.client().cluster("INFO").get("cluster_state") != "ok" for s in running):
                return False
            masters = self.masters()
            return len(masters) == self._masters and all(replicas_in_sync(m, 1) for m in masters)

        try:
            wait_until(healthy, "a healthy cluster with one replica per master", timeout=60)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; the nodes now:\n{self._describe()}") from None

    def _describe(self) -> str:
        """Each node's own view (``CLUSTER INFO`` state, ``CLUSTER NODES``), for a failure."""
        views = []
        for server in self.servers:
            try:
                client = server.client()
                state = client.cluster("INFO").get("cluster_state")
                nodes = client.execute_command("CLUSTER", "NODES")
                text = nodes.decode() if isinstance(nodes, bytes) else str(nodes)
                views.append(f"{server.port}: {state}\n{text}")
            except (redis.RedisError, OSError) as error:
                views.append(f"{server.port}: {error}")
        return "\n".join(views)

    def kill_master(self, server: RedisServer | None = None) -> RedisServer:
        """SIGKILL a master (the first by default) and wait until its replica is promoted and the
        cluster is ok again; return the promoted server."""
        victim = server or self.masters()[0]
        roles = self._roles()
        victim_id = roles[victim.port][0]
        replica_ports = [port for port, (_, _, master) in roles.items() if master == victim_id]
        victim.kill()

        def promoted() -> RedisServer | None:
            now = self._roles()
            for port in replica_ports:
                if now.get(port, ("", "", ""))[1] == "master":
                    new = next(s for s in self.servers if s.port == port)
                    if new.client().cluster("INFO").get("cluster_state") == "ok":
                        return new
            return None

        found: RedisServer = wait_until(promoted, "a replica to take over the killed master")
        return found

    def stop(self) -> None:
        for server in self.servers:
            server.resume()
            server.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
