"""The library on servers that renamed ``INFO`` and ``CONFIG`` away, as managed services do.

A real ``redis-server``, a ``valkey-server`` and a real 3-master Redis Cluster (joined with ``CLUSTER ADDSLOTSRANGE`` and
``CLUSTER MEET``: ``redis-cli --cluster create`` itself needs ``INFO``), each started by the test
with ``rename-command INFO ""`` and ``rename-command CONFIG ""``. Every strategy, the asyncio
front end, the ORM, the lock, maintenance and the command line work there; what the library
cannot rely on is said once per node (``INFO replication``, and the eviction policy that neither
``CONFIG GET`` nor ``INFO memory`` tells), and ``strict=True`` refuses the node.
"""

from __future__ import annotations

import asyncio
import logging
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sa_redis_ids import ConfigError, RedisIds
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.cli import main
from tests.support.orm import draw_lock_and_maintain, each_strategy, insert_orders
from tests.support.servers import HOST, RedisServer
from tests.support.services import valkey_server_binary

RENAMED = ["--rename-command", "INFO", "", "--rename-command", "CONFIG", ""]

FACTORIES = each_strategy("rn", "RN")


class Renamed:
    """A server (``kind``: ``redis``, ``valkey``), or a Redis Cluster of three masters
    (``cluster``), with ``INFO`` and ``CONFIG`` renamed away."""

    def __init__(self, kind: str):
        self.cluster = cluster = kind == "cluster"
        binary = valkey_server_binary() if kind == "valkey" else "redis-server"
        directory = Path(tempfile.mkdtemp(prefix="sa_redis_ids_renamed_"))
        self.servers = [
            RedisServer(cluster=cluster, directory=directory, args=RENAMED, binary=binary)
            for _ in range(3 if cluster else 1)
        ]

    def start(self) -> Renamed:
        for server in self.servers:
            server.start()
        if self.cluster:
            bounds = [0, 5461, 10923, 16384]
            for index, server in enumerate(self.servers):
                client = server.client()
                client.execute_command(
                    "CLUSTER", "ADDSLOTSRANGE", bounds[index], bounds[index + 1] - 1
                )
            for server in self.servers[1:]:
                self.servers[0].client().execute_command("CLUSTER", "MEET", HOST, server.port)
            deadline = time.monotonic() + 30
            for server in self.servers:
                while server.client().cluster("INFO").get("cluster_state") != "ok":
                    assert time.monotonic() < deadline, "the cluster did not reach state ok"
                    time.sleep(0.05)
        return self

    @property
    def url(self) -> str:
        return self.servers[0].url

    def cli(self, *args: str) -> list[str]:
        return [*args, "--redis-url", self.url, *(["--cluster"] if self.cluster else [])]

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


@pytest.fixture(params=["redis", "valkey", "cluster"], scope="module")
def renamed(request: pytest.FixtureRequest) -> Iterator[Renamed]:
    """Started once per kind for this module, stopped by process id."""
    found = Renamed(request.param)
    try:
        yield found.start()
    finally:
        found.stop()


def test_every_strategy_the_lock_and_maintenance_work_and_say_what_is_lost(
    renamed: Renamed, caplog: pytest.LogCaptureFixture
) -> None:
    ids = RedisIds.from_url(renamed.url, cluster=renamed.cluster)
    try:
        with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
            draw_lock_and_maintain(ids, FACTORIES)
    finally:
        ids.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "sa_redis_ids"]
    assert len(warnings) == 2, warnings  # once per node, not once per generator
    assert "INFO replication" in warnings[0]
    assert "CONFIG GET maxmemory-policy or INFO memory" in warnings[1]
    with pytest.raises(ConfigError, match="INFO replication"):
        RedisIds.from_url(renamed.url, cluster=renamed.cluster, strict=True).sequence(
            "rn_strict"
        ).next_id()


def test_the_asyncio_front_end_works(renamed: Renamed) -> None:
    async def draw() -> dict[str, list[int | str]]:
        ids = AsyncRedisIds.from_url(renamed.url, cluster=renamed.cluster)
        try:
            return {name: await make(ids).next_ids(20) for name, make in FACTORIES.items()}
        finally:
            await ids.aclose()

    drawn = asyncio.run(draw())
    assert all(len(set(values)) == 20 for values in drawn.values()), drawn


def test_the_orm_inserts(renamed: Renamed, tmp_path: Path) -> None:
    ids = RedisIds.from_url(renamed.url, cluster=renamed.cluster)
    insert_orders(ids, str(tmp_path / "orm.db"), "rn")


def test_the_command_line_works_and_status_says_what_is_lost(
    renamed: Renamed, capsys: pytest.CaptureFixture[str]
) -> None:
    code = ["--strategy", "daily_code", "--code-prefix", "CL"]
    assert main(renamed.cli("next", "rn_cli", *code, "-n", "3", "--new")) == 0
    assert main(renamed.cli("next", "rn_cli", "-n", "2")) == 0
    assert main(renamed.cli("claims", "show", "rn_cli")) == 0
    assert main(renamed.cli("maintain", "--once", "--daily-code", "rn_cli")) == 0
    assert main(renamed.cli("status")) == 0
    captured = capsys.readouterr()
    assert len(set(re.findall(r"CL\d{12}", captured.out))) >= 5, captured.out
    assert "LOST failover_detection" in captured.out and "LOST eviction_check" in captured.out
    assert "error" not in captured.err, captured.err
