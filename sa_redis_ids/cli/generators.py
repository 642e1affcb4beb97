"""How a sub-command gets the application's generator of a namespace, never a guessed one.

Two sources, in this order of preference:

* ``--app module:attr``: the application's own ``RedisIds`` and generators, with every option and
  ``floor=`` (see `sa_redis_ids.cli.maintain.load_app`);
* the **node claims**: each node records the options that shape a namespace's values the first
  time a generator writes there (`sa_redis_ids.maintenance.claims`). Without ``--app`` the
  generator is rebuilt from them. An option given on the command line must equal the recorded
  one, else the command stops with a [`ConfigError`][sa_redis_ids.ConfigError].

Only when no node records a claim are the options taken from the command line (the library's
defaults for the ones left out), and each command says what it does then.

Every strategy option on the command line comes from the strategy's own declaration in the
registry ([`OptionSpec`][sa_redis_ids.generators.registry.OptionSpec], the built-ins' in
`builtin`): its flag, how its text is read, its help and the factory
keyword it sets. A strategy a user registers gets its options on every command the same way.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from typing import Any

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.generators.registry import (
    OptionSpec,
    Strategy,
    strategies,
    strategy,
    strategy_of_config,
)
from sa_redis_ids.ids import RedisIds
from sa_redis_ids.keys import KeySpace
from sa_redis_ids.maintenance.claims import claim_kinds, generator_from_claims, recorded_config
from sa_redis_ids.redis.nodes import Node
from sa_redis_ids.redis.scripts import reply_text

ANY_STRATEGY = "generator"

RAW = "_raw_generator_options"
"""Where a parser notes the options it kept as text: strategies declared the same flag with
different parsers, so each value is read by the chosen strategy's own."""


def merged_options(
    among: Iterable[Strategy], *, per_call: bool = True, parse_only: bool = False
) -> dict[str, list[tuple[Strategy, OptionSpec]]]:
    """Flag → the strategies of ``among`` that declare it, with their declarations."""
    found: dict[str, list[tuple[Strategy, OptionSpec]]] = {}
    for each in among:
        for spec in each.options:
            if (spec.per_call and not per_call) or (spec.parse_only and not parse_only):
                continue
            found.setdefault(spec.flag, []).append((each, spec))
    return found


def add_generator_options(
    parser: argparse.ArgumentParser,
    among: Iterable[Strategy] | None = None,
    *,
    per_call: bool = True,
    parse_only: bool = False,
    title: str = "generator options (without --app; default: what the nodes record for the "
    "namespace, else the library's defaults; an option that differs from the record is refused)",
) -> None:
    """The options the strategies ``among`` (default: every registered one) declare, all
    defaulting to "not given" (None); a flag several strategies declare is added once."""
    group = parser.add_argument_group(title)
    raw: list[str] = []
    for flag, declared in merged_options(
        strategies() if among is None else among, per_call=per_call, parse_only=parse_only
    ).items():
        by_help: dict[str, list[str]] = {}
        for each, spec in declared:
            by_help.setdefault(spec.help, []).append(each.name)
        helps = "; ".join(f"{', '.join(names)}: {text}" for text, names in by_help.items())
        specs = [spec for _, spec in declared]
        if all(spec.is_switch for spec in specs):
            group.add_argument(flag, action="store_true", default=None, help=helps)
            continue
        parsers = {spec.parse for spec in specs if not spec.is_switch}
        kind: Callable[[str], Any] = parsers.pop() if len(parsers) == 1 else str
        if len(parsers) or any(spec.is_switch for spec in specs):
            raw.append(specs[0].dest)
        group.add_argument(flag, type=kind, metavar=specs[0].dest.upper(), help=helps)
    parser.set_defaults(**{RAW: raw})


def _declared(*, per_call: bool) -> dict[str, OptionSpec]:
    """Every registered option flag (of factory options, or of per-call ones)."""
    return {
        spec.flag: spec
        for each in strategies()
        for spec in each.options
        if spec.per_call == per_call
    }


def given_flags(args: argparse.Namespace) -> list[str]:
    """The generator (factory) options given on the command line."""
    return [
        flag
        for flag, spec in _declared(per_call=False).items()
        if getattr(args, spec.dest, None) is not None
    ]


def _given(args: argparse.Namespace, kind: str, *, per_call: bool) -> dict[str, Any]:
    chosen = strategy(kind)
    found: dict[str, Any] = {}
    for flag, any_spec in _declared(per_call=per_call).items():
        value = getattr(args, any_spec.dest, None)
        if value is None:
            continue
        spec = chosen.option(flag)
        if spec is None or spec.per_call != per_call:
            raise ConfigError(f"{flag} is not an option of a {kind} generator")
        if spec.dest in getattr(args, RAW, ()):
            value = _read(spec, value)
        found[spec.keyword] = value
    return found


def _read(spec: OptionSpec, value: Any) -> Any:
    """A value kept as text (or a switch's True) read by ``spec``."""
    if spec.is_switch:
        if value is not True:
            raise ConfigError(f"{spec.flag} takes no value")
        return True
    if value is True:
        raise ConfigError(f"{spec.flag} needs a value")
    try:
        return spec.parse(value)
    except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:
        raise ConfigError(f"{spec.flag}: {exc}") from None


def given_options(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    """The generator options given for a ``kind`` generator, as factory keyword arguments.

    An option of another strategy (``--fmt`` for a sequence) is a [`ConfigError`][sa_redis_ids.ConfigError].
    """
    return _given(args, kind, per_call=False)


def call_options(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    """The per-call options given (a snowflake's ``--shard``), as ``next_ids`` keywords."""
    return _given(args, kind, per_call=True)


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
    """The registered strategy that makes ``generator`` (``date_prefixed``…), by its config."""
    found = strategy_of_config(generator.config)
    return found.name if found is not None else generator.config.partition(":")[0]


def claimed_kinds(ids: RedisIds, namespace: str, kinds: list[str]) -> dict[str, str]:
    """Of ``kinds``, those some node records a claim of for ``namespace``, with the config."""
    readable = set(claim_kinds())
    found: dict[str, str] = {}
    for kind in kinds:
        config = recorded_config(ids, namespace, kind) if kind in readable else None
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
    given and the library's defaults, and False; with neither, a [`ConfigError`][sa_redis_ids.ConfigError]: the
    application's options are unknown and would be guessed. A strategy whose claims cannot be read
    back (a snowflake) is always made from the options given; its nodes check them by the claim.
    """
    chosen: str | None = args.strategy
    if chosen is not None and chosen not in claim_kinds():
        return ids.generator(chosen, namespace, **given_options(args, chosen)), False
    found = claimed_kinds(ids, namespace, claim_kinds())
    if chosen is not None and chosen not in found and found:
        raise ConfigError(
            f"the nodes record no {chosen} claim for this namespace, only "
            f"{', '.join(map(repr, found.values()))}; check the namespace and --strategy",
            namespace=namespace,
        )
    if chosen is not None:
        found = {kind: config for kind, config in found.items() if kind == chosen}
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
    chosen = chosen or default
    if chosen is None:
        others = claims_not_rebuilt(ids, namespace)
        if others:
            described = ", ".join(f"a {kind} claim ({config!r})" for kind, config in others.items())
            raise ConfigError(
                f"the nodes record {described} for this namespace, and such a generator is not "
                "rebuilt from its claim: use --app MODULE:ATTR, or give --strategy and the "
                "application's options",
                namespace=namespace,
            )
        raise ConfigError(
            "no node records a claim for this namespace, so the application's options are "
            "unknown: use --app MODULE:ATTR, or give --strategy and the application's options",
            namespace=namespace,
        )
    return ids.generator(chosen, namespace, **given_options(args, chosen)), False


def claims_not_rebuilt(ids: RedisIds, namespace: str) -> dict[str, str]:
    """The claims some node records for ``namespace`` of strategies whose generators cannot be
    rebuilt from them (a snowflake), by strategy name: the config of the first node that has one."""
    rebuilt = set(claim_kinds())
    found: dict[str, str] = {}
    for each in strategies():
        part = each.key_part
        if each.name in rebuilt or part is None:
            continue
        key = KeySpace(ids.prefix, namespace).key(part, "node")

        def read(node: Node, key: str = key) -> Any:
            return node.client.get(key)

        for claim in ids.nodes.each(namespace, read):
            if claim is not None:
                found[each.name] = reply_text(claim).partition("|")[2]
                break
    return found
