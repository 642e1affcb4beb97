"""What a node set reports when metrics are enabled: the `Observer` interface.

A `NodeSet` has an ``observer`` attribute, None by default: then
nothing is measured and a call pays one ``is None`` check. `sa_redis_ids.metrics` sets it to
an observer that feeds Prometheus or OpenTelemetry. Two kinds of reports reach it:

* every generator call (one `call_plan`, wrapped by
  `observed`): its namespace and strategy, how long it took, how many values Redis handed
  out, and the exception if it raised;
* every error that marks a node down (`Observer.node_error`).

Everything else (buffer statistics, rewinds, pool fill, which nodes are up) is read from the
instances when metrics are collected or refreshed, so the per-ID path of a buffer carries nothing.

This module imports nothing of the package, so the node set can depend on it without a cycle.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


class Observer:
    """Receives reports of a node set; each method does nothing here (override what you need).

    Methods run in the thread (or on the event loop) that made the call, so they must be quick and
    must not raise.
    """

    def call(
        self,
        namespace: str,
        strategy: str,
        seconds: float,
        values: int,
        error: BaseException | None,
    ) -> None:
        """A generator call ended: ``values`` values handed out by Redis (0 when it raised
        ``error``) in ``seconds`` (floor reads and waits included)."""

    def node_error(self, node: str, kind: str) -> None:
        """Node ``node`` failed with an error of class ``kind`` and is skipped for a while."""

    def detach(self, ids: object) -> None:
        """Instance ``ids`` is closed or no longer reported: let go of it (what it counted is
        written first; a thread left with nothing to read stops)."""


class Fanout(Observer):
    """Several observers as one (Prometheus and OpenTelemetry at once)."""

    def __init__(self, observers: Iterable[Observer]):
        self.observers = tuple(observers)

    def call(
        self,
        namespace: str,
        strategy: str,
        seconds: float,
        values: int,
        error: BaseException | None,
    ) -> None:
        for observer in self.observers:
            observer.call(namespace, strategy, seconds, values, error)

    def node_error(self, node: str, kind: str) -> None:
        for observer in self.observers:
            observer.node_error(node, kind)

    def detach(self, ids: object) -> None:
        for observer in self.observers:
            observer.detach(ids)


def values_in(result: object) -> int:
    """How many values a generator call's answer holds: a ``list`` or ``range`` of values, or a
    tuple whose first item is one (a day counter's ``(values, day, redis_ms)``); 0 otherwise."""
    if isinstance(result, (list, range)):
        return len(result)
    if isinstance(result, tuple) and result and isinstance(result[0], (list, range)):
        return len(result[0])
    return 0


def observed(
    observer: Observer, namespace: str, strategy: str, plan: Generator[Any, Any, T]
) -> Generator[Any, Any, T]:
    """``plan`` (one generator call), reported to ``observer`` when it ends."""
    started = time.perf_counter()
    try:
        result = yield from plan
    except GeneratorExit:  # closed unfinished (its caller went away): nothing to report
        raise
    except BaseException as exc:
        observer.call(namespace, strategy, time.perf_counter() - started, 0, exc)
        raise
    observer.call(namespace, strategy, time.perf_counter() - started, values_in(result), None)
    return result
