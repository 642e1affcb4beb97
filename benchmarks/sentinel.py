"""What ``from_sentinel``'s default (``replicas=1``) costs per call, and how long a switch-over
leaves callers without values.

``python -m benchmarks.sentinel [--rounds N] [--quick] [--switch-overs N]`` starts its own master,
replica and three Sentinels (``redis-server`` on free loopback ports, stopped by process id at
the end; Sentinel ``down-after-milliseconds`` 1000, as fast-failing deployments set it) and
measures, in one run:

1. per call, interleaved (each round times every call once, so all see the same load): a
   redis-py ``PING`` on the master, ``sequence`` ``next_id()`` through ``from_sentinel`` with its
   defaults and with ``replicas=0``, and a block fetch of 1000 (``next_ids(1000)``) with both;
2. per switch-over (``SENTINEL FAILOVER``, the old master left to Sentinel as in production): one
   thread per configuration draws ``next_id()`` without pause; the longest time between two values
   it received is its **time without values**. Also the time until the Sentinels name the new
   master (promotion) and until Sentinel demotes the old one (the window in which the old master
   still takes writes).

Timings are never asserted anywhere; compare the ratio columns.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from benchmarks.replicas import measure
from benchmarks.report import table
from sa_redis_ids import RedisIds, SaRedisIdsError
from tests.support.topologies import SentinelTopology

CONFIGS = {"default (replicas=1)": {}, "replicas=0": {"replicas": 0}}


def cost_rows(topology: SentinelTopology, rounds: int) -> list[list[object]]:
    """The per-call table: median and p99 µs, × PING, and × the ``replicas=0`` call."""
    made = {
        name: RedisIds.from_sentinel(
            topology.addresses, topology.service, prefix="bench_sentinel", **options
        )
        for name, options in CONFIGS.items()
    }
    ping = topology.master().client().ping
    calls: dict[str, Callable[[], object]] = {"PING": ping}
    for name, ids in made.items():
        tag = "d" if name.startswith("default") else "z"
        one, block = ids.sequence(f"one_{tag}"), ids.sequence(f"block_{tag}")
        calls[f"next_id() {name}"] = one.next_id
        calls[f"block of 1000 {name}"] = lambda block=block: block.next_ids(1000)  # type: ignore[misc]
    measure(calls, max(10, rounds // 10))  # warm up: connections, script loads, eviction check
    samples = measure(calls, rounds)
    for ids in made.values():
        ids.close()
    medians = {name: statistics.median(found) for name, found in samples.items()}
    rows: list[list[object]] = []
    for name, found in samples.items():
        ordered = sorted(found)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        base = name.replace("default (replicas=1)", "replicas=0")
        versus = medians[name] / medians[base] if base != name else "-"
        rows.append([name, medians[name] * 1e6, p99 * 1e6, medians[name] / medians["PING"], versus])
    return rows


@dataclass
class Drawer:
    """A thread drawing ``next_id()`` without pause; the times it received values."""

    ids: RedisIds
    times: list[float] = field(default_factory=list)
    errors: int = 0

    def run(self, stop: threading.Event) -> None:
        seq = self.ids.sequence("switch")
        while not stop.is_set():
            try:
                seq.next_id()
            except SaRedisIdsError:
                self.errors += 1
                continue
            self.times.append(time.monotonic())

    def longest_gap(self, start: float) -> float:
        """The longest time without a value, counted from ``start`` (the switch-over)."""
        after = [start] + [t for t in self.times if t >= start]
        return max(b - a for a, b in itertools.pairwise(after)) if len(after) > 1 else 0


def switch_over_rows(topology: SentinelTopology) -> list[list[object]]:
    """One switch-over with a drawing thread per configuration; one row each."""
    topology.wait_replicas_in_sync()
    drawers = {
        name: Drawer(
            RedisIds.from_sentinel(
                topology.addresses, topology.service, prefix="bench_switch", **options
            )
        )
        for name, options in CONFIGS.items()
    }
    stop = threading.Event()
    threads = [threading.Thread(target=d.run, args=(stop,)) for d in drawers.values()]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        old = topology.master()
        start = time.monotonic()
        topology.failover()
        promoted = time.monotonic() - start
        topology.wait_demoted(old)
        demoted = time.monotonic() - start
        topology.wait_replicas_in_sync()
        time.sleep(1.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    rows: list[list[object]] = []
    for name, drawer in drawers.items():
        drawer.ids.close()
        rows.append([name, drawer.longest_gap(start), promoted, demoted, drawer.errors])
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3000, help="timed calls of each kind")
    parser.add_argument("--quick", action="store_true", help="300 rounds, one switch-over")
    parser.add_argument("--switch-overs", type=int, default=3, help="switch-overs to time")
    args = parser.parse_args(argv)
    topology = SentinelTopology().start()
    try:
        costs = cost_rows(topology, 300 if args.quick else args.rounds)
        switches: list[list[object]] = []
        for _ in range(1 if args.quick else args.switch_overs):
            switches += switch_over_rows(topology)
    finally:
        topology.stop()
    headers = ["call", "median µs", "p99 µs", "× PING", "default / replicas=0"]
    print(table(headers, costs))
    print()
    headers = ["from_sentinel", "time without values s", "promoted after s", "demoted after s"]
    print(table([*headers, "failed calls"], switches))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
