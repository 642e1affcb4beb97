"""What the library's objects do when the process forks (``os.fork``, a pre-fork server such as
gunicorn with ``--preload``, ``multiprocessing`` with the ``fork`` start method).

A forked child has one thread, the one that forked; every lock another thread of the parent held at
that moment stays held in the child for good, and any call that waits on it hangs. So each lock,
pool and cache of the library is either renewed in the child or never held across I/O; objects
that keep one subclass `ForkSafe` and are renewed by the one ``os.register_at_fork`` hook below:

* `ForkSafe.before_fork` runs in the forking thread just before the fork: an object whose
  lock guards writes that must not be copied half-done (the metrics) takes it there, and gives it
  back in `ForkSafe.after_fork_in_parent`;
* `ForkSafe.after_fork_in_child` runs in the child: new locks, nothing inherited that belongs to
  the parent's threads or connections.

redis-py renews a connection pool in a child (``ConnectionPool._checkpid``), but waits on the
pool's lock to do it; `renew_client_locks` gives the pools of the library's clients new locks
first, so a child forked while a parent's thread was taking or making a connection does not hang.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any


class ForkSafe:
    """An object renewed at a fork (see the module doc); call `watch_forks` in ``__init__``."""

    def watch_forks(self) -> None:
        """Renew this object at every fork while it lives (held weakly)."""
        _LIVE.add(self)

    def before_fork(self) -> None:
        """In the forking thread, just before the fork (default: nothing)."""

    def after_fork_in_parent(self) -> None:
        """In the parent, just after the fork (default: nothing)."""

    def after_fork_in_child(self) -> None:
        """In the child, just after the fork (default: nothing)."""


class RenewedLock(ForkSafe):
    """A lock (``with lock:``) that a forked child gets anew, free: for a module's lock, which has
    no object of its own to renew it. Hold it for moments, never across I/O."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.watch_forks()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()


_LIVE: weakref.WeakSet[ForkSafe] = weakref.WeakSet()
_PREPARED: list[ForkSafe] = []
"""The objects whose `ForkSafe.before_fork` ran, in order (strongly held through the fork)."""


def _live() -> list[ForkSafe]:
    """The objects in `_LIVE` now. Another thread may make one while the set is read (a
    ``WeakSet`` then raises ``RuntimeError``: its size changed): it is read again, since an
    object left out, or every object after a failed read, would keep its locks in the child."""
    while True:
        try:
            return list(_LIVE)
        except RuntimeError:  # changed size under the iteration: read it again
            continue


def _before() -> None:
    _PREPARED[:] = _live()
    for each in _PREPARED:
        each.before_fork()


def _after_in_parent() -> None:
    prepared, _PREPARED[:] = list(_PREPARED), []
    for each in reversed(prepared):
        each.after_fork_in_parent()


def _after_in_child() -> None:
    prepared, _PREPARED[:] = list(_PREPARED), []
    for each in prepared:
        each.after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child
    )


# -- redis-py clients -----------------------------------------------------------------------------

_RLOCK = type(threading.RLock())
_LOCK = type(threading.Lock())

_CLIENT_LOCKS = ("_lock", "_fork_lock", "_initialization_lock")
"""The lock attributes of a redis-py pool (``_lock``, ``_fork_lock``), cluster client and its
nodes manager (``_lock``, shared by both, and ``_initialization_lock``)."""


def renew_client_locks(client: Any) -> None:
    """In a forked child: give ``client``'s redis-py connection pools (a cluster's per-node pools
    and nodes manager included) new locks of the same kind, one new lock per old one (a lock two
    objects share stays shared). Only the forking thread runs in a child, so no lock can be held
    there by anyone who will ever release it."""
    renewed: dict[int, Any] = {}
    for part in _parts(client):
        for name in _CLIENT_LOCKS:
            old = getattr(part, name, None)
            if isinstance(old, (_RLOCK, _LOCK)):
                new = renewed.get(id(old))
                if new is None:
                    new = renewed[id(old)] = (
                        threading.RLock() if isinstance(old, _RLOCK) else threading.Lock()
                    )
                setattr(part, name, new)


def _parts(client: Any) -> list[Any]:
    """``client``, its connection pool, for a Sentinel client the pools of its sentinels, and for
    a cluster its nodes manager and nodes' pools."""
    parts = [client]
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        parts.append(pool)
        manager = getattr(pool, "sentinel_manager", None)
        for sentinel in getattr(manager, "sentinels", ()):
            parts.append(getattr(sentinel, "connection_pool", None))
    manager = getattr(client, "nodes_manager", None)
    if manager is not None:
        parts.append(manager)
        for node in list(getattr(manager, "nodes_cache", {}).values()):
            redis_client = getattr(node, "redis_connection", None)
            if redis_client is not None:
                parts.append(getattr(redis_client, "connection_pool", None))
    return [part for part in parts if part is not None]
