"""Start and stop ``redis-server`` processes and a 3-master Redis Cluster on free loopback ports.

Every process started here is stopped by its own process id; nothing else is touched.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import redis

from tests.support.services import require_binary

HOST = "127.0.0.1"


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _port_range() -> tuple[int, int]:
    """Where this test process picks its ports: 20000-29999, split between the workers of a
    parallel run (``pytest -n``) so that two workers never race for one port; a cluster node's
    bus port (+10000) lands in 30000-39999, also split."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    width = 10000 // max(count, 1)
    low = 20000 + index * width
    return low, low + width - 1


def free_port(*, with_bus: bool = False) -> int:
    """A loopback port nobody listens on (and, for cluster nodes, its bus port +10000 too)."""
    low, high = _port_range()
    for _ in range(200):
        port = random.randint(low, high)
        if _free(port) and (not with_bus or _free(port + 10000)):
            return port
    raise RuntimeError("no free loopback port found")


def stop_process(process: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM a process this test session started (by its pid), SIGKILL it after 10 s, reap it."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class RedisServer:
    """One ``redis-server`` process on a free loopback port; ``stop()``/``start()`` keep the port.

    ``binary``: the server program, ``redis-server`` on PATH unless given (a ``valkey-server``
    takes the same options).
    """

    def __init__(
        self,
        *,
        cluster: bool = False,
        directory: Path | None = None,
        args: Sequence[str] = (),
        binary: str = "redis-server",
        wrapper: Sequence[str] = (),
        start_seconds: float = 10.0,
        unix_socket: bool = False,
    ):
        self.cluster = cluster
        self.binary = binary
        self.wrapper = list(wrapper)
        """A command the server runs under (``valgrind --tool=callgrind``, say); none by default."""
        self.start_seconds = start_seconds
        self.args = list(args)  # extra redis-server options, after (so overriding) the defaults
        self.port = free_port(with_bus=cluster)
        self.dir = directory or Path(tempfile.mkdtemp(prefix="sa_redis_ids_test_"))
        self.socket = self.dir / f"redis-{self.port}.sock" if unix_socket else None
        """The server's Unix socket (beside its TCP port), when asked for."""
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def client_url(self) -> str:
        """The Unix socket's URL when the server has one, else the TCP one."""
        return f"unix://{self.socket}?db=0" if self.socket else self.url

    def client(self) -> redis.Redis:
        return redis.Redis(host=HOST, port=self.port, socket_timeout=5)

    def start(self) -> RedisServer:
        binary = require_binary(self.binary)
        args = [
            *self.wrapper,
            binary,
            "--port",
            str(self.port),
            "--bind",
            HOST,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.dir),
            "--logfile",
            str(self.dir / f"redis-{self.port}.log"),
        ]
        if self.cluster:
            args += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                f"nodes-{self.port}.conf",
                "--cluster-node-timeout",
                "5000",
            ]
        if self.socket:
            args += ["--unixsocket", str(self.socket), "--unixsocketperm", "700"]
        args += self.args
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self.start_seconds
        while True:
            try:
                if self.client().ping():
                    return self
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.02)

    def stop(self) -> None:
        """Stop this process (by its pid) and wait for it to exit."""
        stop_process(self.process)
        self.process = None

    def kill(self) -> None:
        """SIGKILL this process (by its pid), as a crash would, and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def pause(self) -> None:
        """SIGSTOP this process: it keeps its connections open but answers nothing."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused process."""
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


def create_cluster(servers: list[RedisServer], *, replicas: int) -> None:
    """Start cluster-enabled ``servers`` and join them with ``redis-cli --cluster create``
    (``replicas`` per master)."""
    cli = require_binary("redis-cli")
    for server in servers:
        server.start()
    addresses = [f"{HOST}:{server.port}" for server in servers]
    per_master = ["--cluster-replicas", str(replicas)]
    subprocess.run(
        [cli, "--cluster", "create", *addresses, *per_master, "--cluster-yes"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )


class RedisClusterProcesses:
    """Three cluster-enabled servers joined with ``redis-cli --cluster create``."""

    def __init__(self, masters: int = 3):
        directory = Path(tempfile.mkdtemp(prefix="sa_redis_ids_cluster_"))
        self.servers = [RedisServer(cluster=True, directory=directory) for _ in range(masters)]

    @property
    def url(self) -> str:
        return self.servers[0].url

    def start(self) -> RedisClusterProcesses:
        create_cluster(self.servers, replicas=0)
        deadline = time.monotonic() + 30
        for server in self.servers:
            while server.client().cluster("INFO").get("cluster_state") != "ok":
                if time.monotonic() > deadline:
                    raise RuntimeError("the test cluster did not reach cluster_state:ok")
                time.sleep(0.05)
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
