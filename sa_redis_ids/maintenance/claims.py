"""Generators rebuilt from what the Redis nodes record about a namespace: its claims.

The first write of a generator to a node records a claim for its namespace and strategy,
``index/count|config``, where ``config`` holds every option that shapes values
(``sequence:start=1``, ``date_prefixed:fmt=YYYYMMDD:length=19:start=1:tz=UTC``…). A tool that does
not import the application (the command line without ``--app``) reads the claims to build each
generator with the application's options instead of guessing them:

```python
invoices = generator_from_claims(ids, "invoices", "date_prefixed")   # None: no claim anywhere
```

Which strategies can be read back is the registry's to say: those registered with
``from_claims=True`` (the built-ins but snowflake, whose config records its layout's bits, and any
user strategy whose ``config`` is ``name:keyword=value:…``). Each recorded part is read by the
strategy's declared option of that name (``--digits`` reads ``digits=4`` as an int), and the
generator is rebuilt through ``ids.generator(name, namespace, **options)``.

A claim does not hold ``floor=``, which lives in the application's code: a generator rebuilt from
claims must never create a day's counter, or a Redis that lost its data would restart that day at
0 below what the database holds. Maintenance built on such generators only purges and reports.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.generators.registry import Strategy, strategies, strategy, strategy_of_config
from sa_redis_ids.ids import RedisIds
from sa_redis_ids.keys import KeySpace
from sa_redis_ids.redis.scripts import reply_text

if TYPE_CHECKING:
    from sa_redis_ids.redis.nodes import Node


def claim_kinds() -> list[str]:
    """The registered strategies whose generators can be rebuilt from their claims (those
    registered with ``from_claims=True`` and their generator class), by name."""
    return [s.name for s in strategies() if s.from_claims and s.key_part is not None]


def _claimable(kind: str) -> Strategy:
    found = strategy(kind)
    if not found.from_claims or found.key_part is None:
        raise ConfigError(
            f"a {kind} generator cannot be rebuilt from the claims its nodes record; "
            f"those that can: {', '.join(claim_kinds())}"
        )
    return found


def recorded_claims(ids: RedisIds, namespace: str, kind: str) -> list[tuple[str, str | None]]:
    """Each node's name with the claim it records for ``namespace`` and ``kind`` (None: none)."""
    part = _claimable(kind).key_part
    assert part is not None
    key = KeySpace(ids.prefix, namespace).key(part, "node")

    def action(node: Node) -> tuple[str, str | None]:
        found = node.client.get(key)
        return node.name, None if found is None else reply_text(found)

    return ids.nodes.each(namespace, action)


def recorded_config(ids: RedisIds, namespace: str, kind: str) -> str | None:
    """The ``config`` the nodes record for ``namespace`` and ``kind``, or None when none does.

    Nodes that record different configs raise [`ConfigError`][sa_redis_ids.ConfigError] naming each node's claim: the
    namespace was used with other options at some point, and no single generator fits it.
    """
    claims = recorded_claims(ids, namespace, kind)
    configs = {claim.partition("|")[2] for _, claim in claims if claim is not None}
    if len(configs) > 1:
        found = "; ".join(f"{name}: {claim!r}" for name, claim in claims if claim is not None)
        raise ConfigError(
            f"the nodes record different {kind} claims for this namespace ({found}); "
            "they must all record the application's options",
            namespace=namespace,
        )
    return configs.pop() if configs else None


def options_from_config(config: str) -> tuple[str, dict[str, Any]]:
    """The strategy and the factory keyword arguments of a recorded ``config``.

    ``"date_prefixed:fmt=YYMMDD:length=12:start=0:tz=UTC"`` gives
    ``("date_prefixed", {"fmt": "YYMMDD", "length": 12, "start": 0, "tz": "UTC"})``: each part is
    read by the strategy's declared option of that (recorded) name, other parts stay text.
    """
    kind = config.partition(":")[0]
    found = strategy_of_config(config)
    if found is None or not found.from_claims:
        raise ConfigError(f"cannot read the recorded config {config!r}: unknown kind {kind!r}")
    by_name = {spec.config_name: spec for spec in found.options if not spec.per_call}
    rest = config.partition(":")[2]
    options: dict[str, Any] = {}
    for part in rest.replace(",", ":").split(":") if rest else []:
        name, sep, value = part.partition("=")
        if not sep or not name:
            raise ConfigError(f"cannot read the recorded config {config!r}: bad part {part!r}")
        spec = by_name.get(name)
        if spec is None:
            options[name] = value
            continue
        try:
            options[spec.keyword] = spec.parse(value)
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            raise ConfigError(f"cannot read the recorded config {config!r}: {part!r}") from None
    return found.name, options


def generator_from_claims(
    ids: RedisIds, namespace: str, kind: str, given: Mapping[str, Any] | None = None
) -> IdGenerator[Any] | None:
    """The ``kind`` generator of ``namespace`` with the options its claims record; None if no node
    records one.

    ``given`` are options a user asked for (factory keyword arguments); one that differs from the
    claim raises [`ConfigError`][sa_redis_ids.ConfigError] rather than being used, and one the claim does not record
    (``js_safe``, ``grace_days``) is passed on. The generator is also checked against each node's
    claim, so another node list (order or count) is refused here, before anything is written.
    """
    config = recorded_config(ids, namespace, kind)
    if config is None:
        return None
    _, options = options_from_config(config)
    for name, value in (given or {}).items():
        if name in options and options[name] != value:
            raise ConfigError(
                f"{name}={value!r} differs from the claim the nodes record, {config!r}; "
                "leave the option out to use the recorded one",
                namespace=namespace,
            )
    generator = ids.generator(kind, namespace, **{**options, **(given or {})})
    if generator.config != config:
        raise ConfigError(
            f"cannot rebuild the recorded config {config!r} (got {generator.config!r})",
            namespace=namespace,
        )
    generator.check_claims()
    return generator
