"""Sans-IO plans: generator logic written once, run by a sync or an asyncio driver.

A *plan* is a Python generator that yields *effects* (run a script or a transaction on a node,
send one command, call a floor, sleep) and receives each effect's result, or has the effect's
exception thrown into it at the ``yield``. It returns its answer. Every strategy, the node
failover and the lock are written as plans, so their logic exists once; `run_plan` runs a plan
on sync redis-py clients and `run_plan_async` awaits it on ``redis.asyncio`` clients:

```python
def take(node):                                   # a plan
    reply = yield Run(node, "sequence", keys, args)
    return int(reply[1])

run_plan(take(node))                              # sync front end
await run_plan_async(take(node))                  # asyncio front end
```

A plan must not hold a thread lock across a ``yield`` when it may run on the asyncio driver.

A public method that does I/O is written once, as a plan, and decorated with `planned`:
called on a sync generator it runs the plan at once; the asyncio front end
([`AsyncIdGenerator`][sa_redis_ids.generators.aio.AsyncIdGenerator]) finds the plan with `plan_of` and
offers the same method as a coroutine.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from sa_redis_ids.errors import ConfigError

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")

Commands = tuple[tuple[Any, ...], ...]
"""The commands of a transaction, each its parts (``(b"INCRBY", key, n)``)."""

PLAN_ATTRIBUTE = "__plan__"
"""Where `planned` keeps a method's plan."""


class Node(Protocol):
    """What the effects need of a node (a `Node`)."""

    client: Any

    def run(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any: ...

    async def run_async(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any: ...

    def transact(self, key: Any, commands: Commands) -> list[Any] | None: ...

    async def transact_async(self, key: Any, commands: Commands) -> list[Any] | None: ...

    def command(self, method: str, *args: Any) -> Any: ...

    async def command_async(self, method: str, *args: Any) -> Any: ...


class Effect:
    """One piece of I/O a plan asks its driver for."""

    __slots__ = ()

    def run(self) -> Any:
        """Carry the effect out on sync clients and return its result."""
        raise NotImplementedError

    async def run_async(self) -> Any:
        """Carry the effect out on asyncio clients and return its result."""
        raise NotImplementedError


Plan = Generator[Effect, Any, T]
"""A plan answering ``T``."""


class Run(Effect):
    """Run the library script ``name`` on ``node`` (see `run`)."""

    __slots__ = ("args", "keys", "name", "node")

    def __init__(self, node: Node, name: str, keys: Sequence[Any], args: Sequence[Any]):
        self.node = node
        self.name = name
        self.keys = keys
        self.args = args

    def run(self) -> Any:
        return self.node.run(self.name, self.keys, self.args)

    async def run_async(self) -> Any:
        return await self.node.run_async(self.name, self.keys, self.args)


class Transact(Effect):
    """Run ``commands`` on ``node`` as one ``MULTI``/``EXEC`` transaction (see
    ``Node.transact``; ``key``: the first key of the script that judges the same state): ``EXEC``'s
    replies, or None when they did not run so."""

    __slots__ = ("commands", "key", "node")

    def __init__(self, node: Node, key: Any, commands: Commands):
        self.node = node
        self.key = key
        self.commands = commands

    def run(self) -> list[Any] | None:
        return self.node.transact(self.key, self.commands)

    async def run_async(self) -> list[Any] | None:
        return await self.node.transact_async(self.key, self.commands)


class Command(Effect):
    """Call the redis-py client method ``method`` (``"get"``, ``"hexists"`` …: a read, which
    may be sent twice) of ``node`` (``Node.command``: a stale connection is renewed as for a
    script)."""

    __slots__ = ("args", "method", "node")

    def __init__(self, node: Node, method: str, *args: Any):
        self.node = node
        self.method = method
        self.args = args

    def run(self) -> Any:
        return self.node.command(self.method, *self.args)

    async def run_async(self) -> Any:
        return await self.node.command_async(self.method, *self.args)


class CallFloor(Effect):
    """Call a generator's floor with ``args``. On the asyncio driver the floor may be a coroutine
    function; on the sync driver it must answer at once."""

    __slots__ = ("args", "floor")

    def __init__(self, floor: Callable[..., Any], *args: Any):
        self.floor = floor
        self.args = args

    def run(self) -> Any:
        answer = self.floor(*self.args)
        if inspect.isawaitable(answer):
            close = getattr(answer, "close", None)
            if close is not None:
                close()
            raise ConfigError(
                "floor= returned an awaitable: a coroutine floor needs the asyncio front end "
                "(sa_redis_ids.asyncio.AsyncRedisIds)"
            )
        return answer

    async def run_async(self) -> Any:
        answer = self.floor(*self.args)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer


class Sleep(Effect):
    """Wait ``seconds`` (a thread sleep, or ``asyncio.sleep`` on the asyncio driver)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float):
        self.seconds = seconds

    def run(self) -> None:
        time.sleep(self.seconds)

    async def run_async(self) -> None:
        await asyncio.sleep(self.seconds)


def run_plan(plan: Plan[T]) -> T:
    """Run ``plan`` to its answer on sync clients."""
    send = plan.send
    try:
        effect = send(None)
        while True:
            try:
                result = effect.run()
            except BaseException as exc:  # the plan decides what an error means
                effect = plan.throw(exc)
            else:
                effect = send(result)
    except StopIteration as done:
        answer: T = done.value
        return answer


async def run_plan_async(plan: Plan[T]) -> T:
    """Run ``plan`` to its answer on asyncio clients, never blocking the event loop on I/O."""
    send = plan.send
    try:
        effect = send(None)
        while True:
            try:
                result = await effect.run_async()
            except BaseException as exc:  # includes CancelledError: the plan cleans up, re-raises
                effect = plan.throw(exc)
            else:
                effect = send(result)
    except StopIteration as done:
        answer: T = done.value
        return answer


def now(action: Callable[..., T], *args: Any) -> Plan[T]:
    """A plan that calls ``action(*args)`` and yields nothing (sync-only work inside a plan)."""
    return action(*args)
    yield  # pragma: no cover - makes this function a generator


def planned(plan: Callable[Concatenate[S, P], Plan[T]]) -> Callable[Concatenate[S, P], T]:
    """A sync method that runs the plan method ``plan`` (same name, arguments and docstring).

    The asyncio front end awaits the very same plan (see `plan_of`), so an I/O method is
    written once and exists on both front ends.
    """

    def method(self: S, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_plan(plan(self, *args, **kwargs))

    functools.update_wrapper(method, plan)
    setattr(method, PLAN_ATTRIBUTE, plan)
    return method


def planned_as(
    plan: Callable[Concatenate[S, P], Plan[T]],
) -> Callable[[Callable[Concatenate[S, P], T]], Callable[Concatenate[S, P], T]]:
    """Mark a sync method as the sync form of the plan method ``plan``, for a sync path that does
    better than running the plan (the asyncio front end awaits ``plan``, see `plan_of`)."""

    def mark(method: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
        setattr(method, PLAN_ATTRIBUTE, plan)
        return method

    return mark


def plan_of(method: object) -> Callable[..., Plan[Any]] | None:
    """The plan behind a `planned` method (looked up on the class), or None."""
    found: Callable[..., Plan[Any]] | None = getattr(method, PLAN_ATTRIBUTE, None)
    return found
