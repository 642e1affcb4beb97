"""Duplicates where the guarantees stop: the figures behind the docs' guarantees table.

``python -m benchmarks.faults [--runs N]`` starts its own ``redis-server`` processes on free
loopback ports (stopped by process id at the end) and counts the values handed out twice in the
configurations the documentation does not call safe, next to the safe one they differ from:

1. **a process that never received values from a node draws first after the node lost its data**
   (a new process, or one restarted together with Redis): without ``floor=`` it starts over; with a
   floor it continues above the table (every strategy, one process each, deterministic);
2. **losses faster than the processes call the node**: ``allkeys-lru`` eviction driven for a
   second by a flood of other keys, while 3 processes × 2 threads draw from every strategy (the
   heal of one process can land below what another took after its own heal);
3. **``headroom=0`` with ``floor=`` and ``block=``**: ``FLUSHALL`` twice while 3 processes insert
   through the ORM into PostgreSQL (``SA_REDIS_IDS_TEST_POSTGRES_URL``, default the local
   server); failed batches are the blocks that other processes still held.

Counts vary from run to run (they depend on timing); nothing here is asserted.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from benchmarks.report import table
from sa_redis_ids import RedisIds
from tests.support.faults import CONFIGS, Load, run_with_fault
from tests.support.orm_load import OrmLoad, insert_with_fault, model
from tests.support.servers import RedisServer
from tests.support.services import POSTGRES_URL

FACTORIES: dict[str, dict[str, Any]] = {
    "sequence": {},
    "date_prefixed": {},
    "daily_code": {"digits": 8, "tz": "UTC"},
    "snowflake": {},
    "short_id": {"pool_size": 4000, "offset": 10_000},
}


def table_floor(name: str, generator: Any, issued: list[Any]) -> Any:
    """What ``floor=`` reads from a table holding ``issued`` (see ``floor_from_column``)."""
    if name == "short_id":
        return lambda: issued
    if name in ("date_prefixed", "daily_code"):
        return lambda day: max(generator.parse(v).counter for v in issued)
    return lambda: max(issued)


def late_joiner(server: RedisServer, *, with_floor: bool) -> dict[str, int]:
    """Per strategy: values a newcomer repeats after the node lost 1,000 values of another."""
    found: dict[str, int] = {}
    for name, options in FACTORIES.items():
        prefix = f"late{uuid.uuid4().hex[:8]}"
        first = getattr(RedisIds.from_url(server.url, prefix=prefix), name)("ns", **options)
        issued = first.next_ids(1000)
        server.client().flushall()
        floor = table_floor(name, first, issued) if with_floor else None
        second = getattr(RedisIds.from_url(server.url, prefix=prefix), name)(
            "ns", floor=floor, **options
        )
        found[name] = len(set(issued) & set(second.next_ids(1000)))
    return found


def flood_eviction(runs: int) -> dict[str, list[int]]:
    """Per generator of the fault suite: duplicates of each run under a second of flooding."""
    found: dict[str, list[int]] = {label: [] for label, _, _ in CONFIGS}
    for _ in range(runs):
        server = RedisServer(args=["--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru"])
        server.start()
        try:
            stop = threading.Event()

            def flood(server: RedisServer = server, stop: threading.Event = stop) -> None:
                client = server.client()
                n = 0
                while not stop.is_set():
                    client.set(f"other:{n}", b"x" * 2048)
                    n += 1

            def evict(stop: threading.Event = stop, flood: Any = flood) -> None:
                thread = threading.Thread(target=flood)
                thread.start()
                time.sleep(1.0)
                stop.set()
                thread.join()

            load = Load({"urls": [server.url]}, f"ev{uuid.uuid4().hex[:8]}")
            for label, drawn in run_with_fault(load, evict).items():
                found[label].append(drawn.duplicates())
        finally:
            server.stop()
    return found


def orm_flush(runs: int, headroom: int | None) -> list[tuple[int, int]]:
    """(batches committed, batches failed) of each run."""
    name = f"faults_{uuid.uuid4().hex[:8]}"
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}"))
    url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    results = []
    try:
        for _ in range(runs):
            server = RedisServer().start()
            engine = create_engine(url)
            load = OrmLoad(server.url, url, f"orm{uuid.uuid4().hex[:8]}", headroom=headroom)
            row = model(load, engine)
            row.metadata.drop_all(engine)
            row.metadata.create_all(engine)
            try:

                def flush_twice(server: RedisServer = server) -> None:
                    server.client().flushall()
                    time.sleep(0.8)
                    server.client().flushall()

                batches, failed = insert_with_fault(load, flush_twice)
                results.append((batches, sum(failed.values())))
            finally:
                row.metadata.drop_all(engine)
                engine.dispose()
                server.stop()
    finally:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each timing-dependent case")
    runs = parser.parse_args(argv).runs

    server = RedisServer().start()
    try:
        bare, floored = late_joiner(server, with_floor=False), late_joiner(server, with_floor=True)
    finally:
        server.stop()
    print("1. a newcomer draws 1,000 values first after the node lost 1,000 of another process")
    print(
        table(
            ["strategy", "repeated, no floor", "repeated, floor="],
            [[name, bare[name], floored[name]] for name in FACTORIES],
        )
    )
    evicted = flood_eviction(runs)
    print(f"\n2. allkeys-lru eviction flooded for 1 s, 3 processes × 2 threads, {runs} runs")
    print(table(["generator", "duplicates per run"], [[k, v] for k, v in evicted.items()]))
    print(f"\n3. FLUSHALL twice under ORM inserts, floor= and block=200, {runs} runs each")
    rows = [
        [label, ", ".join(f"{failed} of {batches + failed}" for batches, failed in found)]
        for label, found in (
            ("headroom=0", orm_flush(runs, 0)),
            ("default headroom", orm_flush(runs, None)),
        )
    ]
    print(table(["configuration", "failed batches per run"], rows))


if __name__ == "__main__":
    main()
