"""Generators rebuilt from what the Redis nodes record about a namespace: its claims.

The first write of a generator to a node records a claim for its namespace and strategy,
``index/count|config``, where ``config`` holds every option that shapes values
(``sequence:start=1``, ``date_prefixed:fmt=YYYYMMDD:length=19:start=1:tz=UTC``…). A tool that does
not import the application (the command line without ``--app``) reads the claims to build each
generator with the application's options instead of guessing them::

    invoices = generator_from_claims(ids, "invoices", "date_prefixed")   # None: no claim anywhere

A claim does not hold ``floor=``, which lives in the application's code: a generator rebuilt from
claims must never create a day's counter, or a Redis that lost its data would restart that day at
0 below what the database holds. Maintenance built on such generators only purges and reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.generators.daily_code import DailyCodeGenerator
from sa_redis_ids.generators.date_prefixed import DatePrefixedGenerator
from sa_redis_ids.generators.sequence import SequenceGenerator
from sa_redis_ids.generators.short_id import ShortIdGenerator
from sa_redis_ids.ids import RedisIds
from sa_redis_ids.keys import KeySpace
from sa_redis_ids.redis.scripts import reply_text

if TYPE_CHECKING:
    from sa_redis_ids.redis.nodes import Node

KINDS: dict[str, type[IdGenerator[Any]]] = {
    "sequence": SequenceGenerator,
    "date_prefixed": DatePrefixedGenerator,
    "daily_code": DailyCodeGenerator,
    "short_id": ShortIdGenerator,
}
"""The strategies whose claims can be read back: the ``RedisIds`` factory of the same name makes
them, and the keys of their ``config`` are that factory's keyword arguments."""

INT_OPTIONS = frozenset({"start", "length", "digits", "pool_size", "offset"})
"""Options recorded as integers (the others are text)."""


def recorded_claims(ids: RedisIds, namespace: str, kind: str) -> list[tuple[str, str | None]]:
    """Each node's name with the claim it records for ``namespace`` and ``kind`` (None: none)."""
    key = KeySpace(ids.prefix, namespace).key(KINDS[kind].strategy, "node")

    def action(node: Node) -> tuple[str, str | None]:
        found = node.client.get(key)
        return node.name, None if found is None else reply_text(found)

    return ids.nodes.each(namespace, action)


def recorded_config(ids: RedisIds, namespace: str, kind: str) -> str | None:
    """The ``config`` the nodes record for ``namespace`` and ``kind``, or None when none does.

    Nodes that record different configs raise :class:`ConfigError` naming each node's claim: the
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
    """The kind and the factory keyword arguments of a recorded ``config``.

    ``"date_prefixed:fmt=YYMMDD:length=12:start=0:tz=UTC"`` gives
    ``("date_prefixed", {"fmt": "YYMMDD", "length": 12, "start": 0, "tz": "UTC"})``.
    """
    kind, _, rest = config.partition(":")
    if kind not in KINDS:
        raise ConfigError(f"cannot read the recorded config {config!r}: unknown kind {kind!r}")
    options: dict[str, Any] = {}
    for part in rest.replace(",", ":").split(":") if rest else []:
        name, sep, value = part.partition("=")
        if not sep or not name:
            raise ConfigError(f"cannot read the recorded config {config!r}: bad part {part!r}")
        try:
            options[name] = int(value) if name in INT_OPTIONS else value
        except ValueError:
            raise ConfigError(f"cannot read the recorded config {config!r}: {part!r}") from None
    if kind == "daily_code" and "prefix" in options:  # recorded under its older name
        options["code_prefix"] = options.pop("prefix")
    return kind, options


def generator_from_claims(
    ids: RedisIds, namespace: str, kind: str, given: Mapping[str, Any] | None = None
) -> IdGenerator[Any] | None:
    """The ``kind`` generator of ``namespace`` with the options its claims record; None if no node
    records one.

    ``given`` are options a user asked for (factory keyword arguments); one that differs from the
    claim raises :class:`ConfigError` rather than being used, and one the claim does not record
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
