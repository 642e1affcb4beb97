"""What ``replicas=1`` (a script plus ``WAIT`` in one round trip) costs against plain script calls.

``python -m benchmarks.replicas [--rounds N] [--quick]`` starts its own master and replica
(``redis-server`` on free loopback ports, stopped by process id at the end) and measures, in one
interleaved run (each round times every call once, so all see the same load on a shared machine):

1. a redis-py ``PING`` on the master: the floor of one round trip;
2. ``sequence`` ``next_id()`` with the default ``replicas=0`` and with ``replicas=1``;
3. a buffered block fetch (``next_ids(1000)``: one ``INCRBY`` of 1000, what a ``block=1000``
   generator does per refill) with ``replicas=0`` and ``replicas=1``.

It prints the median and p99 per call, each call's ratio to ``PING`` and the ``replicas=1`` /
``replicas=0`` ratios. Timings are never asserted anywhere.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

from benchmarks.report import table
from sa_redis_ids import RedisIds
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
        measure(calls, max(10, rounds // 10))  # warm up: connections, script loads, eviction check
        samples = measure(calls, rounds)
    finally:
        pair.stop()
    medians = {name: statistics.median(found) for name, found in samples.items()}
    rows: list[list[object]] = []
    for name, found in samples.items():
        ordered = sorted(found)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        base = name.replace("replicas=1", "replicas=0")
        versus = medians[name] / medians[base] if base != name else "-"
        rows.append([name, medians[name] * 1e6, p99 * 1e6, medians[name] / medians["PING"], versus])
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3000, help="timed calls of each kind")
    parser.add_argument("--quick", action="store_true", help="300 rounds")
    args = parser.parse_args(argv)
    rows = run(300 if args.quick else args.rounds)
    headers = ["call", "median µs", "p99 µs", "× PING", "replicas=1 / replicas=0"]
    print(table(headers, rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
