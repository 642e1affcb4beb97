"""Memory per namespace: what many namespaces (one per tenant) cost a process.

``python -m benchmarks.namespaces [--namespaces N] [--kept K]``: for each strategy, ``N``
namespaces are asked for in turn (``ids.short_id(f"tenant{i}")`` …, no Redis call: a generator
talks to Redis only when it draws), and the memory Python allocated for them is read with
``tracemalloc`` after a full collection. Twice: with every generator kept (``generators_kept=N``,
what an instance did before it was bounded) and with the default bound (``generators_kept=K``,
default `GENERATORS_KEPT`). Printed: MB in all, bytes per namespace, and the generators in memory.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sa_redis_ids import RedisIds
from sa_redis_ids.generators.cache import GENERATORS_KEPT

STRATEGIES: dict[str, Callable[[RedisIds, str], Any]] = {
    "short_id": lambda ids, ns: ids.short_id(ns),
    "sequence": lambda ids, ns: ids.sequence(ns),
    "sequence block=1000": lambda ids, ns: ids.sequence(ns, block=1000),
    "snowflake": lambda ids, ns: ids.snowflake(ns),
    "date_prefixed": lambda ids, ns: ids.date_prefixed(ns),
    "daily_code": lambda ids, ns: ids.daily_code(ns),
}
RESULTS = Path(__file__).parent / "results" / "namespaces.json"


def measure(strategy: str, namespaces: int, kept: int) -> dict[str, Any]:
    """Bytes allocated (and still held after a collection) by asking for ``namespaces``
    generators of ``strategy`` on an instance that keeps ``kept``."""
    ids = RedisIds.embedded()
    ids.generators_kept = kept
    make = STRATEGIES[strategy]
    make(ids, "warm_up")  # modules, scripts' text, the first node's state: not per namespace
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(namespaces):
            make(ids, f"tenant{n}")
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    in_memory = len(ids.generators)
    ids.close()
    grown = max(0, after - before)
    return {
        "strategy": strategy,
        "namespaces": namespaces,
        "kept": kept,
        "mb": round(grown / 1e6, 2),
        "bytes_per_namespace": round(grown / namespaces),
        "generators_in_memory": in_memory,
    }


def run(namespaces: int, kept: int, strategies: Sequence[str] = tuple(STRATEGIES)) -> list[Any]:
    """``(unbounded, bounded)`` measurements per strategy."""
    return [
        (measure(name, namespaces, namespaces), measure(name, namespaces, kept))
        for name in strategies
    ]


def render(rows: list[Any]) -> str:
    lines = [
        "| strategy | namespaces | all kept: MB (B/namespace) | kept "
        f"{rows[0][1]['kept']}: MB (generators in memory) |",
        "|---|---:|---:|---:|",
    ]
    for every, bounded in rows:
        lines.append(
            f"| {every['strategy']} | {every['namespaces']} | {every['mb']} "
            f"({every['bytes_per_namespace']}) | {bounded['mb']} "
            f"({bounded['generators_in_memory']}) |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.namespaces", description=__doc__)
    parser.add_argument("--namespaces", type=int, default=20_000)
    parser.add_argument("--kept", type=int, default=GENERATORS_KEPT)
    args = parser.parse_args(argv)
    rows = run(args.namespaces, args.kept)
    print(render(rows))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps([list(pair) for pair in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
