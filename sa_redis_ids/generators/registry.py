"""The open set of strategies: a name, and how to build a generator of it.

Every factory of :class:`~sa_redis_ids.RedisIds` and :class:`~sa_redis_ids.asyncio.AsyncRedisIds`
goes through this registry: ``ids.sequence("users")`` is ``ids.generator("sequence", "users")``.
A user adds a strategy with :func:`register_strategy` (its Lua in its own package, see
:func:`~sa_redis_ids.redis.scripts.script_source`); it then works with ``ids.generator``, the ORM
glue and maintenance, which ask a generator for its abilities by type
(:mod:`~sa_redis_ids.generators.abilities`), never by name.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sa_redis_ids.errors import ConfigError

if TYPE_CHECKING:
    from sa_redis_ids.generators.base import IdGenerator
    from sa_redis_ids.redis.nodes import Node, NodeSet

NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")


@dataclass(frozen=True)
class Context:
    """What a strategy's build function gets from the instance that makes the generator."""

    nodes: NodeSet
    """The instance's Redis nodes."""
    prefix: str
    """The key prefix of the instance (``RedisIds(prefix=...)``)."""
    day_lock: Callable[[str, list[Node]], Any]
    """``day_lock(name, nodes)``: the Redlock that guards seeding a day's counter from a floor."""


Build = Callable[..., "IdGenerator[Any]"]
"""``build(context, namespace, **options)``: a new generator of the strategy."""


@dataclass(frozen=True)
class Strategy:
    """A registered strategy."""

    name: str
    build: Build
    summary: str


_STRATEGIES: dict[str, Strategy] = {}
_LOCK = threading.Lock()


def register_strategy(name: str, build: Build, *, summary: str = "", replace: bool = False) -> None:
    """Register strategy ``name`` (lowercase letters, digits, ``_``): ``ids.generator(name, ns,
    **options)`` then calls ``build(context, ns, **options)``. A second registration of a name
    raises :class:`ConfigError` unless ``replace=True``."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ConfigError(
            f"strategy name {name!r} must be 1-40 lowercase letters, digits or '_', "
            "starting with a letter"
        )
    if not callable(build):
        raise ConfigError(f"build for strategy {name!r} must be callable, not {build!r}")
    with _LOCK:
        if name in _STRATEGIES and not replace:
            raise ConfigError(f"a strategy named {name!r} is already registered")
        _STRATEGIES[name] = Strategy(name, build, summary or (build.__doc__ or "").strip())


def strategy(name: str) -> Strategy:
    """The registered strategy ``name``, or :class:`ConfigError` listing the known ones."""
    found = _STRATEGIES.get(name) if isinstance(name, str) else None
    if found is None:
        known = ", ".join(sorted(_STRATEGIES))
        raise ConfigError(f"no strategy named {name!r}; registered: {known}")
    return found


def strategies() -> list[Strategy]:
    """Every registered strategy, by name."""
    return [_STRATEGIES[name] for name in sorted(_STRATEGIES)]
