"""What one call costs the Redis server: ``INFO commandstats`` time and ``INFO cpu`` per call.

For each contender (``INCR``, an empty ``EVALSHA``, each strategy's ``next_id()``) the benchmark
reads ``INFO commandstats`` and ``INFO cpu`` before and after a run of single calls:

- **commandstats µs/call**: the growth of the command's ``usec`` over the growth of its ``calls``
  (the time Redis spent executing it: the script, not the network);
- **CPU µs/call**: the growth of ``used_cpu_user + used_cpu_sys`` over the calls made, i.e. the
  whole server's CPU per call, reading and parsing the request and writing the reply included;
- **system µs/call**: the ``used_cpu_sys`` part alone: the kernel reading and writing the socket
  and waking the event loop. It is about the same for every contender and differs most between
  machines (a virtual machine's system calls cost more), so a ratio of whole CPU depends on the
  machine: where the kernel's part is smaller, every script's ratio to ``INCR`` is higher.

Other clients of the same server add to both (their calls of the same command, their CPU), so the
contenders run in alternating rounds. Each keeps its lowest round's commandstats time (only
other callers of the same command can raise it) and the median over the rounds of its CPU per
call; the CPU ratio to the first contender (the ``INCR``) is taken within each round and the
median over the rounds is kept: a slow moment of a shared machine then moves the one round it
falls in, not the figures; the system part is the median round's too (see `Cost.system`). Run
it against a server no one else uses for figures that mean something; a Redis Cluster reports
per node and is skipped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import median
from typing import Any, NamedTuple


class Cost(NamedTuple):
    """What one contender's call cost the server."""

    name: str
    command: str
    calls: int
    """Calls made, over every round."""
    usec: float
    """``INFO commandstats`` µs per call: the lowest round's (NaN if the command never showed up
    there: a contender named with the wrong command)."""
    cpu: float
    """``INFO cpu`` (user + system) µs per call: the median round's."""
    ratio: float
    """The median over the rounds of ``cpu`` as a multiple of the first contender's in the same
    round (0.0 if no round gave one)."""
    system: float
    """The kernel's part of the CPU (``used_cpu_sys``), µs per call: the median round's, so that
    ``cpu - system`` is the user-space part. The kernel splits a process's CPU time between user
    and system by sampling at its clock tick (a few ms): a round of a few thousand calls reads it
    to a few µs, the median of ten or more rounds to about one."""


def cpu_times(client: Any) -> tuple[float, float]:
    """The server's user and system CPU seconds so far (``INFO cpu``)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]), float(cpu["used_cpu_sys"])


def cpu_seconds(client: Any) -> float:
    """The server's CPU seconds so far: ``used_cpu_user + used_cpu_sys`` of ``INFO cpu``."""
    return sum(cpu_times(client))


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


def _reading(client: Any, command: str) -> tuple[int, int, float, float]:
    """The command's ``calls`` and ``usec`` so far and the server's user and system CPU seconds."""
    calls, usec = command_stats(client.info("commandstats"), command)
    return calls, usec, *cpu_times(client)


def measure_server(
    client: Any,
    contenders: dict[str, tuple[Callable[[], object], str]],
    *,
    calls: int,
    rounds: int,
) -> list[Cost]:
    """The server's cost per call of each contender ``name: (call, command it sends)``; the
    first contender is the one the CPU ratios are taken against."""
    if calls < 1 or rounds < 1 or not contenders:
        raise ValueError("measure_server needs contenders and at least one round of one call")
    lowest: dict[str, float] = {}
    cpus: dict[str, list[float]] = {name: [] for name in contenders}
    ratios: dict[str, list[float]] = {name: [] for name in contenders}
    systems: dict[str, list[float]] = {name: [] for name in contenders}
    first = next(iter(contenders))
    for _ in range(rounds):
        reference = 0.0
        for name, (call, command) in contenders.items():
            calls_before, usec_before, user_before, sys_before = _reading(client, command)
            for _ in range(calls):
                call()
            calls_after, usec_after, user_after, sys_after = _reading(client, command)
            executed = calls_after - calls_before
            usec = (usec_after - usec_before) / executed if executed > 0 else math.nan
            lowest[name] = min(lowest[name], usec) if name in lowest else usec
            systems[name].append((sys_after - sys_before) * 1e6 / calls)
            cpu = (user_after - user_before + sys_after - sys_before) * 1e6 / calls
            if name == first:
                reference = cpu
            if reference > 0:  # (a round whose first contender read no CPU gives no ratio)
                ratios[name].append(cpu / reference)
            cpus[name].append(cpu)
    return [
        Cost(
            name,
            command,
            calls * rounds,
            lowest[name],
            median(cpus[name]),
            median(ratios[name] or [0.0]),
            median(systems[name]),
        )
        for name, (_call, command) in contenders.items()
    ]
