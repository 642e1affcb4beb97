"""What serving several event loops costs an ``AsyncRedisIds`` call, against a ``PING``, in one run.

``python -m benchmarks.event_loops [--redis-url URL] [--calls 3000]``

An asyncio node keeps a client per running event loop (``sa_redis_ids.redis.loops``); every call
first finds its loop's. This measures, on one Redis in one process:

- ``sequence.next_id()`` on the first loop (the client the instance was given) and on a later
  loop (a client made for it), each call timed alternately with ``PING`` on the same loop's
  client: **× PING** is the median call over the median ``PING`` next to it;
- the lookup alone (``get_running_loop()`` and the loop's state), in nanoseconds per call, and
  its share of a ``PING`` round trip.

It writes JSON to ``benchmarks/results/``; keys live under a fresh prefix, deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Sequence
from typing import Any

from benchmarks.report import machine, table, write_json
from sa_redis_ids.asyncio import AsyncRedisIds

DEFAULT_URL = "redis://127.0.0.1:6379/0"
LOOKUPS = 200_000


async def _paired(ids: AsyncRedisIds, calls: int) -> dict[str, float]:
    """``next_id()`` and ``PING`` on this loop's client, alternately; medians in µs."""
    users = ids.sequence("bench_loops")
    node = ids.nodes.nodes[0]
    await users.next_id()  # this loop's client, scripts and connection are set up
    client = node._loops.here().client
    await client.ping()
    ids_us: list[float] = []
    ping_us: list[float] = []
    clock = time.perf_counter
    for _ in range(calls):
        start = clock()
        await users.next_id()
        middle = clock()
        await client.ping()
        ids_us.append((middle - start) * 1e6)
        ping_us.append((clock() - middle) * 1e6)
    call, ping = statistics.median(ids_us), statistics.median(ping_us)
    return {"call_us": call, "ping_us": ping, "x_ping": call / ping}


async def _lookup_ns(ids: AsyncRedisIds) -> float:
    """Nanoseconds one call spends finding its loop's state (the loop keeps calling)."""
    here = ids.nodes.nodes[0]._loops.here
    here()
    start = time.perf_counter()
    for _ in range(LOOKUPS):
        here()
    return (time.perf_counter() - start) / LOOKUPS * 1e9


def run(url: str = DEFAULT_URL, *, calls: int = 3000) -> dict[str, Any]:
    """Measure both loops and the lookup; the result as a JSON-ready dict."""
    ids = AsyncRedisIds.from_url(url, prefix=f"bench{uuid.uuid4().hex[:8]}")
    rows: dict[str, dict[str, float]] = {}

    async def first() -> None:
        rows["first loop (the given client)"] = await _paired(ids, calls)
        rows["first loop (the given client)"]["lookup_ns"] = await _lookup_ns(ids)

    async def later() -> None:
        rows["a later loop (its own client)"] = await _paired(ids, calls)
        rows["a later loop (its own client)"]["lookup_ns"] = await _lookup_ns(ids)
        client = ids.nodes.nodes[0]._loops.here().client
        keys = [key async for key in client.scan_iter(match=f"{ids.prefix}:*")]
        if keys:
            await client.delete(*keys)
        await ids.aclose()

    asyncio.run(first())
    asyncio.run(later())
    for row in rows.values():
        row["lookup_share_of_ping"] = row["lookup_ns"] / (row["ping_us"] * 1000)
    return {"benchmark": "event_loops", "calls": calls, "rows": rows, "machine": machine()}


def render(result: dict[str, Any]) -> str:
    headers = ("loop", "next_id µs", "PING µs", "× PING", "lookup ns", "lookup / PING")
    body = [
        [
            name,
            f"{row['call_us']:.1f}",
            f"{row['ping_us']:.1f}",
            f"{row['x_ping']:.2f}",
            f"{row['lookup_ns']:.0f}",
            f"{row['lookup_share_of_ping']:.2%}",
        ]
        for name, row in result["rows"].items()
    ]
    return table(headers, body)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis-url", default=DEFAULT_URL, help="a Redis URL")
    parser.add_argument("--calls", type=int, default=3000, help="timed calls per loop")
    args = parser.parse_args(argv)
    result = run(args.redis_url, calls=args.calls)
    print(render(result))
    print(f"\nwritten to {write_json('event_loops', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
