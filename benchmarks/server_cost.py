"""What one ``next_id()`` costs the Redis server, per strategy, against an ``INCR``.

``python -m benchmarks.server_cost [--calls N] [--batches B] [--quick]`` starts its own
``redis-server`` (a free loopback port, stopped by process id at the end) and runs ``B`` rounds in
which each strategy's ``next_id()`` and a redis-py ``INCR`` (sent as ``INCRBY``) in turn make ``N``
calls (alternating, so that a slower minute of a shared machine falls on all of them), reading
before and after each run (`benchmarks.server_info`):

* ``INFO commandstats``: the time per call of ``evalsha`` (the script's time inside Redis, every
  command it runs included), of ``MULTI`` and ``EXEC`` for a sequence (its transaction) or of
  ``incrby``;
* ``INFO cpu``: the server's CPU time (user + system) per call, reading and writing the socket
  included, and the system part of it (the kernel's, about the same for every call).

It prints the lowest of the ``B`` runs of each for ``INFO commandstats`` (only other callers of
the same command can raise it) and the median for ``INFO cpu``, with the ratio to ``INCR``: for
``INFO cpu`` the median over the rounds of the ratio within each round (see
`benchmarks.server_info.measure_server`). Timings are never asserted anywhere.

``--callgrind`` counts instead the instructions the server executes per call, under valgrind (see
`benchmarks.callgrind`): a figure the machine's load does not move, for comparing scripts.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Callable, Sequence

import redis

from benchmarks.callgrind import CallgrindServer
from benchmarks.callgrind import available as callgrind_available
from benchmarks.report import table
from benchmarks.server_info import command_of, measure_server
from sa_redis_ids import RedisIds
from tests.support.servers import RedisServer


def _generators(ids: RedisIds) -> dict[str, Callable[[], object]]:
    """Each strategy's ``next_id``, on fresh namespaces."""
    return {
        "sequence": ids.sequence("seq").next_id,
        "date_prefixed": ids.date_prefixed("dp").next_id,
        "daily_code": ids.daily_code("dc", digits=8, tz="UTC").next_id,
        "snowflake": ids.snowflake("sf").next_id,
        "short_id": ids.short_id("sid", pool_size=10_000_000, offset=10_000_000).next_id,
    }


def run(calls: int, batches: int, *, unix_socket: bool = False) -> list[list[object]]:
    """Start a server, measure every strategy and ``INCR``, stop it; the table's rows.

    ``unix_socket``: every client connects through the server's Unix socket instead of TCP."""
    with contextlib.ExitStack() as cleanup:
        server = RedisServer(unix_socket=unix_socket)
        cleanup.callback(server.stop)  # (also a server that started but never answered)
        server.start()
        client = cleanup.enter_context(redis.Redis.from_url(server.client_url, socket_timeout=5))
        ids = RedisIds.from_url(server.client_url, prefix="bench_server_cost")
        cleanup.callback(ids.close)
        contenders: dict[str, tuple[Callable[[], object], str]] = {
            "redis-py INCR": (lambda: client.incr("bench_server_cost:incr"), "incrby"),
        }
        for name, call in _generators(ids).items():
            for _ in range(min(100, calls)):  # warm up: connection, script load, first-use reads
                call()
            contenders[f"{name} next_id()"] = (call, command_of(name))
        costs = measure_server(client, contenders, calls=calls, rounds=batches)
        incr_usec = costs[0].usec
        rows: list[list[object]] = [
            [
                c.name,
                c.usec,
                c.usec / incr_usec if incr_usec > 0 else math.nan,
                c.cpu,
                c.ratio,
                c.system,
            ]
            for c in costs
        ]
    return rows


def run_callgrind(calls: int) -> list[list[object]]:
    """Instructions per call of ``INCR`` and each strategy's ``next_id()`` in a server run
    under callgrind (see `benchmarks.callgrind`); the table's rows."""
    with CallgrindServer() as server:
        client = redis.Redis.from_url(server.url, socket_timeout=30)
        ids = RedisIds.from_url(server.url, prefix="bench_server_cost", socket_timeout=30)
        try:
            incr = server.instructions(lambda: client.incr("bench_server_cost:incr"), calls)
            rows: list[list[object]] = [["redis-py INCR", round(incr), 1.0]]
            for name, call in _generators(ids).items():
                count = server.instructions(call, calls)
                rows.append([f"{name} next_id()", round(count), count / incr])
        finally:
            ids.close()
            client.close()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=2000, help="calls per batch")
    parser.add_argument("--batches", type=int, default=10, help="batches of each kind")
    parser.add_argument("--quick", action="store_true", help="2 batches of 500 calls")
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="count the server's instructions per call under valgrind instead (--calls of each)",
    )
    parser.add_argument(
        "--unix-socket",
        action="store_true",
        help="connect every client through the server's Unix socket instead of TCP",
    )
    args = parser.parse_args(argv)
    if args.callgrind:
        if not callgrind_available():
            parser.error("--callgrind needs valgrind and callgrind_control on the PATH")
        rows = run_callgrind(200 if args.quick else args.calls)
        print(table(["call", "instructions per call", "× INCR"], rows))
        return 0
    calls, batches = (500, 2) if args.quick else (args.calls, args.batches)
    rows = run(calls, batches, unix_socket=args.unix_socket)
    headers = [
        "call",
        "commandstats µs",
        "× INCR",
        "server CPU µs",
        "× INCR",
        "of it system µs",
    ]
    print(table(headers, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
