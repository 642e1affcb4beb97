"""The cost of ``secret=``: a daily code's ``next_id()`` with a key against one without.

``python -m benchmarks.secret_codes [--redis-url URL] [--calls N]`` (and a row of
``benchmarks.ids`` per width): for 4 digits (the default code: the day's permutation keeps its
round values in small tables) and 9 digits (a wide range: each code costs ten HMAC-SHA256
rounds), a generator with a secret and a plain one, each in a namespace of its own, are called
alternately, call by call, so both see the same load; the ratio of their median calls is what
the secret costs. The target is the 4-digit code's: within 10% of a plain one's.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import uuid
from collections.abc import Sequence
from typing import Any

from benchmarks.report import Timing, time_paired
from sa_redis_ids import RedisIds

SECRET_TARGET = 1.10
"""A 4-digit daily code's ``next_id()`` with ``secret=``, as a multiple of a plain one's."""
TARGET_DIGITS = 4
DIGITS = (4, 9)
"""The widths measured (a 4-digit day holds 9,999 codes: a run takes at most 9,000 of them)."""
MOST_CALLS = 9_000


def measure(
    ids: RedisIds, *, calls: int, budget_s: float, tag: str = "bench"
) -> list[tuple[int, Timing, Timing]]:
    """``(digits, with the secret, plain)`` per width of `DIGITS`, timed alternately."""
    key = secrets.token_hex(32)
    found: list[tuple[int, Timing, Timing]] = []
    for digits in DIGITS:
        hidden = ids.daily_code(f"{tag}_secret{digits}", digits=digits, tz="UTC", secret=key)
        plain = ids.daily_code(f"{tag}_plain{digits}", digits=digits, tz="UTC")
        hidden.next_ids(3)  # script loaded, claim recorded, the day's permutation made
        plain.next_ids(3)
        mine, theirs = time_paired(
            hidden.next_id, plain.next_id, calls=min(calls, MOST_CALLS), budget_s=budget_s
        )
        found.append((digits, mine, theirs))
    return found


def name(digits: int) -> str:
    """The strategy column of a width's row."""
    return f"daily_code secret= ({digits} digits)"


def targets(rows: Sequence[Any]) -> list[dict[str, Any]]:
    """The 4-digit target from rows whose ``extra`` holds ``vs_plain`` (the median ratio)."""
    text = (
        f"daily_code next_id() with secret= ({TARGET_DIGITS} digits) <= {SECRET_TARGET:g}× a "
        "plain one's"
    )
    row = next((r for r in rows if r.strategy == name(TARGET_DIGITS)), None)
    if row is None or "vs_plain" not in row.extra:
        return []
    ratio = row.extra["vs_plain"]
    return [{"target": text, "measured": round(ratio, 3), "met": ratio <= SECRET_TARGET}]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.secret_codes", description=__doc__)
    parser.add_argument("--redis-url", default=None, help="default: the embedded Redis")
    parser.add_argument("--calls", type=int, default=5000, help="calls per generator and width")
    args = parser.parse_args(argv)
    prefix = f"bench{uuid.uuid4().hex[:10]}"
    url = args.redis_url
    ids = RedisIds.from_url(url, prefix=prefix) if url else RedisIds.embedded(prefix=prefix)
    try:
        for digits, mine, theirs in measure(ids, calls=args.calls, budget_s=60.0):
            print(
                f"{digits} digits: {mine.median_s * 1e6:.1f} µs with secret=, "
                f"{theirs.median_s * 1e6:.1f} µs plain (median of {mine.calls} calls each): "
                f"{mine.median_s / theirs.median_s:.3f}×"
            )
    finally:
        client = ids.nodes.nodes[0].client
        if url:
            for key in list(client.scan_iter(match=f"{prefix}:*", count=1000)):
                client.delete(key)
        ids.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
