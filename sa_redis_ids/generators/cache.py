"""The generators an instance made, bounded: the most recently asked held, the rest found while alive.

An application that derives a namespace from a request (``ids.short_id(f"tenant_{id}")``) asks
for a new generator per tenant; holding each one for ever would grow without bound (some kB per
namespace, more with a buffer). So a [`RedisIds`][sa_redis_ids.RedisIds] holds the
`GENERATORS_KEPT` generators asked for most recently (an LRU) and finds every other one only
while something else holds it (a model's ``redis_id(generator)``, a module-level name): asked
again, it is the same object. A generator neither kept nor held elsewhere is freed and built anew
at the next ask, as a new process would build it: what its buffer held becomes a gap, its floor is
read again at its first call, and what the process remembered of the nodes for it starts afresh.

Not locked itself: an instance changes it under its own lock; reading (`values`) takes a
snapshot that writes and collections do not disturb.
"""

from __future__ import annotations

import logging
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Any, Generic, TypeVar

from sa_redis_ids.errors import ConfigError

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

GENERATORS_KEPT = 1000
"""Generators an instance keeps by default (``ids.generators_kept``) besides those held elsewhere."""

logger = logging.getLogger("sa_redis_ids")


def check_kept(kept: object) -> int:
    """``generators_kept``: an int of at least 0 (0: only generators held elsewhere are found)."""
    if isinstance(kept, bool) or not isinstance(kept, int) or kept < 0:
        raise ConfigError(f"generators_kept must be an int of 0 or more, not {kept!r}")
    return kept


class Recent(Generic[K, V]):
    """Values by key: the ``kept`` most recently used held here, every other one found while
    something else holds it. ``options``: what each value was made with (dropped with it)."""

    def __init__(self, kept: int = GENERATORS_KEPT, *, what: str | None = None):
        self.kept = check_kept(kept)
        self.what = what
        """What the values are, for the one warning when the first is let go (None: no warning)."""
        self.let_go = 0
        """How many times a value stopped being held here (it lives on only if held elsewhere)."""
        self._alive: weakref.WeakValueDictionary[K, V] = weakref.WeakValueDictionary()
        self._recent: OrderedDict[K, V] = OrderedDict()
        self._options: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()

    def get(self, key: K) -> V | None:
        """The value of ``key`` if it is alive (it becomes the most recently used), else None."""
        found = self._alive.get(key)
        if found is not None:
            self._keep(key, found)
        return found

    def add(self, key: K, value: V, options: dict[str, Any] | None = None) -> None:
        """Record ``value`` for ``key`` (made with ``options``), as the most recently used."""
        self._alive[key] = value
        if options is not None:
            self._options[value] = options
        self._keep(key, value)

    def resize(self, kept: int) -> None:
        """Keep at most ``kept`` values from now on (the least recently used let go first)."""
        self.kept = check_kept(kept)
        self._trim()

    def _keep(self, key: K, value: V) -> None:
        recent = self._recent
        recent[key] = value
        recent.move_to_end(key)
        self._trim()

    def _trim(self) -> None:
        while len(self._recent) > self.kept:
            self._recent.popitem(last=False)
            self.let_go += 1
            if self.let_go == 1 and self.what is not None:
                # What a freed generator knew is lost with it: said once, counted in `let_go`.
                logger.warning(
                    "more %s asked of one instance than generators_kept=%d: the least recently "
                    "asked are let go, and one nobody else holds is built anew at its next ask, "
                    "as a new process would build it (its buffered values become gaps, and what "
                    "this process remembered of each node for it starts over, so a node that "
                    "comes back rewound is caught by floors and claims alone); raise "
                    "generators_kept above the namespaces in use at once",
                    self.what,
                    self.kept,
                )

    def options(self, key: K) -> dict[str, Any]:
        """The options the value of ``key`` was made with (``KeyError`` when it is gone)."""
        return self._options[self._alive[key]]

    @property
    def held(self) -> int:
        """How many values this holds itself (at most ``kept``)."""
        return len(self._recent)

    def items(self) -> list[tuple[K, V]]:
        """Every value alive, with its key (a snapshot)."""
        pairs = [(ref.key, ref()) for ref in self._alive.valuerefs()]
        return [(key, value) for key, value in pairs if value is not None]

    def values(self) -> list[V]:
        return [value for _, value in self.items()]

    def __iter__(self) -> Iterator[K]:
        return iter([key for key, _ in self.items()])

    def __len__(self) -> int:
        return len(self.items())

    def __contains__(self, key: object) -> bool:
        return self._alive.get(key) is not None  # type: ignore[arg-type]
