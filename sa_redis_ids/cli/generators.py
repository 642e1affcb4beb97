"""How a sub-command gets the application's generator of a namespace, never a guessed one.

Two sources, in this order of preference:

* ``--app module:attr``: the application's own ``RedisIds`` and generators, with every option and
  ``floor=`` (see :func:`sa_redis_ids.cli.maintain.load_app`);
* the **node claims**: each node records the options that shape a namespace's values the first
  time a generator writes there (:mod:`sa_redis_ids.maintenance.claims`). Without ``--app`` the
  generator is rebuilt from them. An option given on the command line must equal the recorded
  one, else the command stops with a :class:`~sa_redis_ids.ConfigError`.

Only when no node records a claim are the options taken from the command line (the library's
defaults for the ones left out), and each command says what it does then.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.ids import RedisIds
from sa_redis_ids.maintenance.claims import KINDS, generator_from_claims, recorded_config

ANY_STRATEGY = "generator"


@dataclass(frozen=True)
class GeneratorOption:
    """A command line option that shapes a generator's values."""

    flag: str
    keyword: str
    """The ``RedisIds`` factory's keyword argument."""
    kinds: frozenset[str]
    """The strategies (factory names) that take it."""


GENERATOR_OPTIONS = [
    GeneratorOption("--start", "start", frozenset({"sequence", "date_prefixed"})),
    GeneratorOption("--js-safe", "js_safe", frozenset({"sequence", "date_prefixed"})),
    GeneratorOption("--fmt", "fmt", frozenset({"date_prefixed"})),
    GeneratorOption("--length", "length", frozenset({"date_prefixed"})),
    GeneratorOption("--tz", "tz", frozenset({"date_prefixed", "daily_code"})),
    GeneratorOption("--code-prefix", "code_prefix", frozenset({"daily_code"})),
    GeneratorOption("--digits", "digits", frozenset({"daily_code"})),
    GeneratorOption("--pool-size", "pool_size", frozenset({"short_id"})),
    GeneratorOption("--offset", "offset", frozenset({"short_id"})),
]


def add_generator_options(parser: argparse.ArgumentParser) -> None:
    """The options of :data:`GENERATOR_OPTIONS`, all defaulting to "not given" (None)."""
    group = parser.add_argument_group(
        "generator options (without --app; default: what the nodes record for the namespace, "
        "else the library's defaults; an option that differs from the record is refused)"
    )
    group.add_argument("--start", type=int, help="sequence: first value; date_prefixed: counter")
    group.add_argument("--js-safe", action="store_true", default=None, help="at most 2^53-1")
    group.add_argument("--fmt", help="date_prefixed: YYYYMMDD, YYMMDD, YYYYDDD or YYDDD")
    group.add_argument("--length", type=int, help="date_prefixed: total digits")
    group.add_argument("--tz", help="date_prefixed (library default UTC), daily_code")
    group.add_argument("--code-prefix", help="daily_code: code prefix")
    group.add_argument("--digits", type=int, help="daily_code: counter digits")
    group.add_argument("--pool-size", type=int, help="short_id: pool size")
    group.add_argument("--offset", type=int, help="short_id: first value of the pool")


def _dest(option: GeneratorOption) -> str:
    return option.flag.removeprefix("--").replace("-", "_")


def given_flags(args: argparse.Namespace) -> list[str]:
    """The generator options given on the command line."""
    return [o.flag for o in GENERATOR_OPTIONS if getattr(args, _dest(o), None) is not None]


def given_options(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    """The generator options given for a ``kind`` generator, as factory keyword arguments.

    An option of another strategy (``--fmt`` for a sequence) is a :class:`ConfigError`.
    """
    found: dict[str, Any] = {}
    for option in GENERATOR_OPTIONS:
        value = getattr(args, _dest(option), None)
        if value is None:
            continue
        if kind not in option.kinds:
            raise ConfigError(f"{option.flag} is not an option of a {kind} generator")
        found[option.keyword] = value
    return found


def refuse_options_with_app(args: argparse.Namespace) -> None:
    """``--app`` brings the generators' options: options given as well would be ignored."""
    flags = given_flags(args)
    if args.app and flags:
        raise ConfigError(f"--app brings the generators' own options; leave out {', '.join(flags)}")


def find_generator(ids: RedisIds, namespace: str, strategy: str | None) -> IdGenerator[Any]:
    """The application's generator of ``namespace`` (of ``strategy``, when several share it)."""
    found = [g for g in ids.generators if g.namespace == namespace]
    if strategy is not None:
        found = [g for g in found if factory_name(g) == strategy]
    if not found:
        what = f"{strategy} generator" if strategy else ANY_STRATEGY
        raise ConfigError(f"the application has no {what} of this namespace", namespace=namespace)
    if len(found) > 1:
        raise ConfigError(
            "several generators share this namespace; choose one with --strategy",
            namespace=namespace,
        )
    return found[0]


def factory_name(generator: IdGenerator[Any]) -> str:
    """The ``RedisIds`` factory that makes ``generator`` (``date_prefixed``…)."""
    return generator.config.partition(":")[0]


def claimed_kinds(ids: RedisIds, namespace: str, kinds: list[str]) -> dict[str, str]:
    """Of ``kinds``, those some node records a claim of for ``namespace``, with the config."""
    found: dict[str, str] = {}
    for kind in kinds:
        config = recorded_config(ids, namespace, kind) if kind in KINDS else None
        if config is not None:
            found[kind] = config
    return found


def generator_from_nodes(
    ids: RedisIds, namespace: str, args: argparse.Namespace, *, default: str | None = None
) -> tuple[IdGenerator[Any], bool]:
    """The generator the node claims describe (``--strategy`` picks among several), checked
    against the options given; returns it and True. A ``--strategy`` the nodes record no claim of,
    while they record others for the namespace, is refused as a likely mistake.

    When no node records a claim: a generator of ``--strategy`` (else ``default``) from the options
    given and the library's defaults, and False; with neither, a :class:`ConfigError`: the
    application's options are unknown and would be guessed.
    """
    strategy: str | None = args.strategy
    found = claimed_kinds(ids, namespace, list(KINDS))
    if strategy is not None and strategy not in found and found:
        raise ConfigError(
            f"the nodes record no {strategy} claim for this namespace, only "
            f"{', '.join(map(repr, found.values()))}; check the namespace and --strategy",
            namespace=namespace,
        )
    if strategy is not None:
        found = {kind: config for kind, config in found.items() if kind == strategy}
    if len(found) > 1:
        raise ConfigError(
            f"the nodes record claims of several strategies for this namespace "
            f"({', '.join(found.values())}); choose one with --strategy",
            namespace=namespace,
        )
    if found:
        (kind,) = found
        generator = generator_from_claims(ids, namespace, kind, given_options(args, kind))
        assert generator is not None
        return generator, True
    chosen = strategy or default
    if chosen is None:
        raise ConfigError(
            "no node records a claim for this namespace, so the application's options are "
            "unknown: use --app MODULE:ATTR, or give --strategy and the application's options",
            namespace=namespace,
        )
    made: IdGenerator[Any] = getattr(ids, chosen)(namespace, **given_options(args, chosen))
    return made, False
