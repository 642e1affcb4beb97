"""What ``replicas=1`` (a script plus ``WAIT`` in one round trip) and ``durable=True`` (a script plus
``WAITAOF``) cost against plain script calls.

``python -m benchmarks.replicas [--rounds N] [--quick]`` starts its own master and replica
(``redis-server`` on free loopback ports, stopped by process id at the end) and measures, in one
interleaved run (each round times every call once, so all see the same load on a shared machine):

1. a redis-py ``PING`` on the master: the floor of one round trip;
2. ``sequence`` ``next_id()`` with the default ``replicas=0`` and with ``replicas=1``;
3. a buffered block fetch (``next_ids(1000)``: one ``INCRBY`` of 1000, what a ``block=1000``
   generator does per refill) with ``replicas=0`` and ``replicas=1``.

It prints the median and p99 per call, each call's ratio to ``PING`` and the ``replicas=1`` /
``replicas=0`` ratios.

A second table (``--durable-rounds N``, 0 to leave it out) measures ``durable=True`` on two
``valkey-server`` processes of its own (``WAITAOF`` needs Redis 7.2+ or Valkey) with ``appendonly
yes``: one with ``appendfsync everysec`` (a call waits for the server's next fsync), one with
``appendfsync always`` (the server fsyncs before it replies); in the same interleaved run, ``PING``
and the plain call on the ``everysec`` server, ``next_id()`` with ``durable=True`` on each, and a
block of 1000 with ``durable=True`` on ``everysec``, each with its ratio to ``PING`` and to the
plain call. Timings are never asserted anywhere.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

from benchmarks.report import table
from sa_redis_ids import RedisIds
from tests.support.servers import RedisServer
from tests.support.services import valkey_server_binary
from tests.support.topologies import ReplicatedPair


def measure(calls: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Seconds of each call, ``rounds`` times, interleaved call by call."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    clock = time.perf_counter
    for _ in range(rounds):
        for name, call in calls.items():
            start = clock()
            call()
            samples[name].append(clock() - start)
    return samples


def warmed(
    calls: dict[str, Callable[[], object]], rounds: int, warm_up: int
) -> dict[str, list[float]]:
    """`measure` after ``warm_up`` untimed rounds (connections, script loads, first use)."""
    measure(calls, warm_up)
    return measure(calls, rounds)


def run(rounds: int) -> list[list[object]]:
    """Start a master and a replica, measure, stop them; the table's rows."""
    pair = ReplicatedPair(replicas=1).start()
    try:
        plain = RedisIds.from_url(pair.master.url, prefix="bench_replicas")
        acked = RedisIds.from_url(pair.master.url, prefix="bench_replicas", replicas=1)
        ping_client = plain.nodes.nodes[0].client
        calls: dict[str, Callable[[], object]] = {
            "PING": ping_client.ping,
            "next_id() replicas=0": plain.sequence("one").next_id,
            "next_id() replicas=1": acked.sequence("one_acked").next_id,
            "block of 1000 replicas=0": lambda: plain.sequence("block").next_ids(1000),
            "block of 1000 replicas=1": lambda: acked.sequence("block_acked").next_ids(1000),
        }
        samples = warmed(calls, rounds, max(10, rounds // 10))
    finally:
        pair.stop()
    return rows_of(samples, lambda name: name.replace("replicas=1", "replicas=0"))


def rows_of(samples: dict[str, list[float]], base_of: Callable[[str], str]) -> list[list[object]]:
    """Median and p99 (µs) of each call, its ratio to ``PING`` and to the call ``base_of(name)``
    ("-" where that is the call itself)."""
    medians = {name: statistics.median(found) for name, found in samples.items()}
    rows: list[list[object]] = []
    for name, found in samples.items():
        ordered = sorted(found)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        base = base_of(name)
        versus = medians[name] / medians[base] if base != name else "-"
        rows.append([name, medians[name] * 1e6, p99 * 1e6, medians[name] / medians["PING"], versus])
    return rows


def run_durable(rounds: int) -> list[list[object]]:
    """Start two Valkey servers with an append-only file (``everysec``, ``always``), measure
    ``durable=True`` against plain calls and ``PING``, stop them; the table's rows."""
    binary = valkey_server_binary()
    servers = {
        fsync: RedisServer(binary=binary, args=["--appendonly", "yes", "--appendfsync", fsync])
        for fsync in ("everysec", "always")
    }
    try:
        for server in servers.values():
            server.start()
        url = servers["everysec"].url
        plain = RedisIds.from_url(url, prefix="bench_durable")
        durable = RedisIds.from_url(url, prefix="bench_durable", durable=True)
        always = RedisIds.from_url(servers["always"].url, prefix="bench_durable", durable=True)
        calls: dict[str, Callable[[], object]] = {
            "PING": plain.nodes.nodes[0].client.ping,
            "next_id()": plain.sequence("one").next_id,
            "next_id() durable, everysec": durable.sequence("one_durable").next_id,
            "next_id() durable, always": always.sequence("one_durable").next_id,
            "block of 1000": lambda: plain.sequence("block").next_ids(1000),
            "block of 1000 durable, everysec": lambda: durable.sequence("block_d").next_ids(1000),
        }
        samples = warmed(calls, rounds, max(3, rounds // 10))
    finally:
        for server in servers.values():
            server.stop()
    return rows_of(samples, lambda name: name.split(" durable")[0])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3000, help="timed calls of each kind")
    parser.add_argument("--quick", action="store_true", help="300 rounds (30 of durable=True)")
    parser.add_argument(
        "--durable-rounds",
        type=int,
        default=100,
        help="timed calls of each kind with durable=True (each may wait for an fsync); 0: none",
    )
    args = parser.parse_args(argv)
    rows = run(300 if args.quick else args.rounds)
    headers = ["call", "median µs", "p99 µs", "× PING", "replicas=1 / replicas=0"]
    print(table(headers, rows))
    durable_rounds = min(30, args.durable_rounds) if args.quick else args.durable_rounds
    if durable_rounds > 0:
        rows = run_durable(durable_rounds)
        headers = ["call", "median µs", "p99 µs", "× PING", "durable / plain"]
        print(table(headers, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
