"""What one call costs the Redis server: ``INFO commandstats`` time and ``INFO cpu`` per call.

For each contender (``INCR``, an empty ``EVALSHA``, each strategy's ``next_id()``) the benchmark
reads ``INFO commandstats`` and ``INFO cpu`` before and after a run of single calls:

- **commandstats µs/call**: the growth of the command's ``usec`` over the growth of its ``calls``
  (the time Redis spent executing it: the script, not the network);
- **CPU µs/call**: the growth of ``used_cpu_user + used_cpu_sys`` over the calls made, i.e. the
  whole server's CPU per call, reading and parsing the request and writing the reply included.

Other clients of the same server add to both (their calls of the same command, their CPU), so the
contenders run in alternating rounds and each keeps its lowest round. The CPU ratio to the first
contender (the ``INCR``) is taken within each round and the median over the rounds is kept: a
slow moment of a shared machine then moves the one round it falls in, not the ratio. Run it
against a server no one else uses for figures that mean something; a Redis Cluster reports per
node and is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import median
from typing import Any

Cost = tuple[str, str, int, float, float, float]
"""``(strategy, command, calls, commandstats µs per call, CPU µs per call, CPU ratio)``: the
lowest round's figures, and the median over the rounds of the CPU per call as a multiple of the
first contender's in the same round."""


def cpu_seconds(client: Any) -> float:
    """The server's CPU seconds so far: ``used_cpu_user + used_cpu_sys`` of ``INFO cpu``."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


SENDS = {"sequence": "multi+exec"}
"""What a strategy's sound ``next_id()`` sends where it is not one ``EVALSHA``: a sequence sends a
transaction (``EXEC``'s time includes the commands it runs)."""


def command_of(strategy: str) -> str:
    """The command (``"evalsha"``, or commands joined by ``+``) a strategy's call sends."""
    return SENDS.get(strategy, "evalsha")


def command_stats(stats: dict[str, Any], command: str) -> tuple[int, int]:
    """``calls`` and ``usec`` of ``command`` in ``INFO commandstats`` (``stats``): for commands
    joined by ``+``, the first one's calls and the sum of their times."""
    calls, usec = 0, 0
    for index, part in enumerate(command.split("+")):
        found = stats.get(f"cmdstat_{part}", {})
        if index == 0:
            calls = int(found.get("calls", 0))
        usec += int(found.get("usec", 0))
    return calls, usec


def _reading(client: Any, command: str) -> tuple[int, int, float]:
    """The command's ``calls`` and ``usec`` so far and the server's CPU seconds."""
    calls, usec = command_stats(client.info("commandstats"), command)
    return calls, usec, cpu_seconds(client)


def measure_server(
    client: Any,
    contenders: dict[str, tuple[Callable[[], object], str]],
    *,
    calls: int,
    rounds: int,
) -> list[Cost]:
    """The server's cost per call of each contender ``name: (call, command it sends)``; the
    first contender is the one the CPU ratios are taken against."""
    best: dict[str, tuple[float, float]] = {}
    ratios: dict[str, list[float]] = {name: [] for name in contenders}
    first = next(iter(contenders))
    for _ in range(rounds):
        reference = 0.0
        for name, (call, command) in contenders.items():
            calls_before, usec_before, cpu_before = _reading(client, command)
            for _ in range(calls):
                call()
            calls_after, usec_after, cpu_after = _reading(client, command)
            executed = max(1, calls_after - calls_before)
            usec = (usec_after - usec_before) / executed
            cpu = (cpu_after - cpu_before) * 1e6 / calls
            if name == first:
                reference = cpu
            if reference > 0:  # (a round whose first contender read no CPU gives no ratio)
                ratios[name].append(cpu / reference)
            found = best.get(name)
            best[name] = (usec, cpu) if found is None else (min(found[0], usec), min(found[1], cpu))
    return [
        (name, command, calls * rounds, *best[name], median(ratios[name] or [0.0]))
        for name, (_call, command) in contenders.items()
    ]
