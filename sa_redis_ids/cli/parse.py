"""``sa-redis-ids parse VALUE [--strategy …]``: print the parts of an ID (time, shard, day, counter…).

Every registered strategy whose generators are
[`Parseable`][sa_redis_ids.generators.abilities.Parseable] is offered, with the options it declares:
VALUE is decoded by a generator of those options (built, never called: no command reaches Redis,
but ``--redis-url`` repeated N times tells a sequence which of N nodes issued a value).

Without ``--strategy`` the strategy is recognised from the value's shape. Each candidate strategy
(those declaring every option given) decodes it, and a reading counts only when it is plausible:

* a date-prefixed value or a daily code: its day lies from 2000-01-01 to tomorrow (a daily code's
  prefix and counter digits are taken from its shape: letters, YYYYMMDD, digits; a date-prefixed
  value is read at its own length in the default format, YYYYMMDD, and in the other formats
  only when that reading is not plausible);
* a snowflake (the ``default`` layout, or ``--layout``): its time lies from a day after its
  layout's epoch (and 2010) to tomorrow;
* a sequence value: below 10^12 (a counter beyond that is not assumed);
* a user's strategy: any value it decodes.

Values that hide their counters (``secret=``) decode with the key: ``--secret-env NAME`` names the
environment variable that holds it (the key never goes on the command line) and ``--namespace``
the namespace that issued the value (each namespace has its own permutation); without them the
digits are read as the counter.

One plausible reading is printed with the strategy named. Several are all printed, each with its
parts, with exit status 1 and a line asking for ``--strategy``; none is a one-line error naming
what each strategy said.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import re
import sys
import warnings
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any

from sa_redis_ids.cli.generators import add_generator_options, given_flags, given_options
from sa_redis_ids.cli.options import add_redis_options, redis_ids_from
from sa_redis_ids.cli.output import plain, print_json
from sa_redis_ids.generators.abilities import Parseable
from sa_redis_ids.generators.daily_code import DailyCodeGenerator
from sa_redis_ids.generators.date_prefixed import FORMATS, MAX_LENGTH, DatePrefixedGenerator
from sa_redis_ids.generators.registry import Context, Strategy, strategies, strategy
from sa_redis_ids.generators.sequence import SequenceGenerator
from sa_redis_ids.generators.snowflake import SnowflakeGenerator
from sa_redis_ids.ids import RedisIds
from sa_redis_ids.keys import validate_namespace

DEFAULT_FORMAT = "YYYYMMDD"
"""The date-prefixed format tried first (the library's default)."""
EARLIEST_DAY = date(2000, 1, 1)
"""Days before this are not taken as a plausible date-keyed reading."""
EARLIEST_SNOWFLAKE = datetime(2010, 1, 1, tzinfo=timezone.utc)
SEQUENCE_BELOW = 10**12
"""A sequence reading is plausible below this."""
DAILY_CODE = re.compile(r"([A-Za-z][A-Za-z_-]*)([0-9]{8})([0-9]+)")
"""A daily code's shape: letters (the prefix), a YYYYMMDD date, the counter's digits."""

_NAMESPACES = itertools.count()

JSON_KEYS = (
    "strategy, recognised (true: found from the value's shape; false: --strategy), then the "
    "decoded parts (value/code, timestamp, ms, shard, sequence, day, counter, node_index…, as the "
    "strategy names them); when the value is ambiguous: value, ambiguous: true, candidates "
    "[{strategy, options, parts}] and exit status 1"
)


def parseable() -> list[Strategy]:
    """The registered strategies whose values decode into parts."""
    return [each for each in strategies() if each.has(Parseable)]


DIGITS = re.compile(r"[0-9]+")
"""A numeric ID as the command line takes it: ASCII digits only (Python's ``int`` would also take
spaces, a sign, ``_`` and other scripts' digits)."""


def _partless() -> list[str]:
    """The registered strategies whose values have no parts to decode (short IDs): a plain
    number may be one of theirs as well as a sequence value."""
    return [each.name for each in strategies() if not each.has(Parseable)]


def _integer(text: str) -> int:
    if not DIGITS.fullmatch(text):
        raise ValueError(f"{text!r} is not an ID: write its digits 0-9 only")
    return int(text)


def register(sub: Any) -> None:
    among = parseable()
    names = [each.name for each in among]
    parser = sub.add_parser(
        "parse",
        help="print the parts of an ID (its strategy recognised from its shape)",
        description="Decode VALUE into its parts: a snowflake ID into its UTC time, shard and "
        "sequence; a date-prefixed ID or a daily code into its day and counter; a sequence "
        "value into its node and counter; any registered strategy that can parse its values. "
        "Without --strategy the strategy is recognised from the value's shape: a reading counts "
        f"when it is plausible (days from {EARLIEST_DAY} to tomorrow, a snowflake's time from a "
        "day after its layout's epoch to tomorrow with the default layout unless --layout is "
        "given, a sequence value below 10^12; a daily code's prefix and digits come from its "
        "shape). An ambiguous value prints every plausible reading and exits 1: pass --strategy "
        "(it always forces one). Options given narrow the candidates to the strategies that "
        "declare them.",
    )
    parser.add_argument("value", metavar="VALUE")
    parser.add_argument(
        "--strategy",
        choices=names,
        default=None,
        help="decode as this strategy (default: recognised from the value's shape)",
    )
    add_generator_options(
        parser,
        among,
        per_call=False,
        parse_only=True,
        title="generator options (default: the library's defaults)",
    )
    parser.add_argument(
        "--namespace",
        default=None,
        help="the namespace that issued VALUE: needed with --secret-env, as each namespace hides "
        "its counters with its own permutation",
    )
    parser.add_argument("--json", action="store_true", help=f"print one JSON object: {JSON_KEYS}")
    add_redis_options(parser)
    parser.set_defaults(run=run)


@dataclass
class Reading:
    """One strategy's decoding of the value."""

    strategy: str
    options: dict[str, Any]
    """The options the decoding generator was built with (beyond the ones given)."""
    parts: dict[str, Any] | None = None
    error: str = ""
    implausible: str = ""
    """Why a decoding that succeeded is not taken as a reading."""


def _record(parts: Any) -> dict[str, Any]:
    return {field.name: plain(getattr(parts, field.name)) for field in dataclasses.fields(parts)}


def _no_lock(name: str, nodes: Any) -> Any:  # pragma: no cover - a decoding takes no lock
    raise RuntimeError("decoding a value takes no lock")


def _decode(
    ids: RedisIds, name: str, text: str, options: dict[str, Any], namespace: str | None = None
) -> tuple[Any, Any]:
    """The generator of ``name`` and ``options`` and its parts of ``text`` (``ValueError``);
    ``namespace``: the one that issued ``text`` (what a secret's permutation depends on)."""
    if options.get("secret") is not None and namespace is None:
        raise ValueError(
            "--secret-env needs --namespace: each namespace hides its counters with its own "
            "permutation"
        )
    with warnings.catch_warnings():
        # Warnings about issuing IDs with these options (an old layout) do not concern decoding.
        warnings.simplefilter("ignore")
        if namespace is None:
            # A namespace per decoding: an instance keeps one generator per strategy and namespace.
            generator = ids.generator(name, f"parse{next(_NAMESPACES)}", **options)
        else:  # built outside the instance: several option sets may decode in this namespace
            context = Context(ids.nodes, ids.prefix, _no_lock)
            generator = strategy(name).build(context, validate_namespace(namespace), **options)
    value: Any = text if generator.python_type is str else _integer(text)
    if not isinstance(generator, Parseable):
        raise ValueError(f"a {name} generator cannot parse its values")
    return generator, generator.parse(value)


def _tries(chosen: Strategy, text: str, given: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The option sets to decode ``text`` with as ``chosen``, in groups: the given ones, completed
    from the value's shape where the strategy's defaults would not fit. A later group is tried
    only when no reading of the earlier ones is plausible (a date-prefixed value is read in the
    default format, YYYYMMDD, before the others)."""
    cls = chosen.generator
    if cls is not None and issubclass(cls, DailyCodeGenerator):
        shape = DAILY_CODE.fullmatch(text)
        if shape is not None:
            inferred = {"code_prefix": shape.group(1), "digits": len(shape.group(3))}
            return [[{**inferred, **given}]]
    if cls is not None and issubclass(cls, DatePrefixedGenerator) and DIGITS.fullmatch(text):
        length = given.get("length", len(text))
        fits = [fmt for fmt in FORMATS if FORMATS[fmt] < length <= MAX_LENGTH]
        if "fmt" in given:
            return [[{**given, "length": length}]]
        first = [fmt for fmt in fits if fmt == DEFAULT_FORMAT]
        rest = [fmt for fmt in fits if fmt != DEFAULT_FORMAT]
        return [
            [{**given, "fmt": fmt, "length": length} for fmt in group]
            for group in (first, rest)
            if group
        ]
    return [[dict(given)]]


def _implausible(generator: Any, parts: Any) -> str:
    """Why a decoding is not a plausible reading; empty when it is."""
    tomorrow = date.today() + timedelta(days=1)
    day = getattr(parts, "day", None)
    if isinstance(generator, (DatePrefixedGenerator, DailyCodeGenerator)) and isinstance(day, date):
        if not EARLIEST_DAY <= day <= tomorrow:
            return f"its day {day} is not between {EARLIEST_DAY} and tomorrow"
        return ""
    if isinstance(generator, SnowflakeGenerator):
        stamp = parts.timestamp
        low = max(generator.layout.epoch + timedelta(days=1), EARLIEST_SNOWFLAKE)
        high = datetime.now(timezone.utc) + timedelta(days=1)
        if not low <= stamp <= high:
            return f"its time {stamp.isoformat()} is not between {low.date()} and tomorrow"
        return ""
    if isinstance(generator, SequenceGenerator) and parts.value >= SEQUENCE_BELOW:
        return "a sequence counter this high is not assumed"
    return ""


def readings(args: argparse.Namespace, ids: RedisIds) -> list[Reading]:
    """Every candidate strategy's decoding of the value (see the module doc)."""
    found: list[Reading] = []
    flags = set(given_flags(args))
    for chosen in parseable():
        declared = {spec.flag for spec in chosen.options}
        if not flags <= declared:
            continue
        try:
            given = given_options(args, chosen.name)
        except ValueError as exc:
            found.append(Reading(chosen.name, {}, error=str(exc)))
            continue
        for group in _tries(chosen, args.value, given):
            tried = [
                _reading(ids, chosen.name, args.value, options, given, args.namespace)
                for options in group
            ]
            found.extend(tried)
            if any(each.parts is not None and not each.implausible for each in tried):
                break
    return found


def _reading(
    ids: RedisIds,
    name: str,
    text: str,
    options: dict[str, Any],
    given: dict[str, Any],
    namespace: str | None = None,
) -> Reading:
    extra = {k: v for k, v in options.items() if k not in given}
    try:
        generator, parts = _decode(ids, name, text, options, namespace)
    except ValueError as exc:
        return Reading(name, extra, error=str(exc))
    return Reading(name, extra, _record(parts), implausible=_implausible(generator, parts))


def _print_parts(record: dict[str, Any], indent: str = "") -> None:
    width = max(len(name) for name in record)
    for name, value in record.items():
        print(f"{indent}{name + ':':<{width + 1}} {value}")


def _options_text(options: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in options.items())


def run(args: argparse.Namespace) -> int:
    try:
        ids = redis_ids_from(args)
        if args.strategy is not None:
            options = given_options(args, args.strategy)
            _, parts = _decode(ids, args.strategy, args.value, options, args.namespace)
            return _show(args, args.strategy, _record(parts), recognised=False)
        found = readings(args, ids)
    except ValueError as exc:
        print(f"sa-redis-ids: error: {exc}", file=sys.stderr)
        return 1
    plausible = [each for each in found if each.parts is not None and not each.implausible]
    if len(plausible) == 1:
        (only,) = plausible
        assert only.parts is not None
        return _show(args, only.strategy, only.parts, recognised=True, options=only.options)
    if plausible:
        return _ambiguous(args, plausible)
    said = "; ".join(
        f"{each.strategy}"
        + (f" ({_options_text(each.options)})" if each.options else "")
        + f": {each.implausible or each.error}"
        for each in found
    )
    print(
        f"sa-redis-ids: error: {args.value!r} is not recognised as the value of any strategy "
        f"({said or 'no strategy declares these options'}); pass --strategy to force one",
        file=sys.stderr,
    )
    return 1


def _show(
    args: argparse.Namespace,
    name: str,
    parts: dict[str, Any],
    *,
    recognised: bool,
    options: dict[str, Any] | None = None,
) -> int:
    if args.json:
        print_json({"strategy": name, "recognised": recognised, **parts})
        return 0
    how = ""
    if recognised:
        notes = [_options_text(options)] if options else []
        if name == "sequence":
            notes += [f"a {each} value looks the same and has no parts" for each in _partless()]
        how = " (recognised from its shape" + "".join(f"; {note}" for note in notes) + ")"
    print(f"strategy: {name}{how}")
    _print_parts(parts)
    return 0


def _ambiguous(args: argparse.Namespace, plausible: list[Reading]) -> int:
    names = sorted({each.strategy for each in plausible})
    if args.json:
        print_json(
            {
                "value": args.value,
                "ambiguous": True,
                "candidates": [
                    {"strategy": each.strategy, "options": each.options, "parts": each.parts}
                    for each in plausible
                ],
            }
        )
    else:
        print(f"{args.value} has {len(plausible)} plausible readings:")
        for each in plausible:
            assert each.parts is not None
            extra = f" ({_options_text(each.options)})" if each.options else ""
            print(f"  as {each.strategy}{extra}:")
            _print_parts(each.parts, indent="    ")
    print(
        f"sa-redis-ids: error: {args.value!r} is ambiguous ({', '.join(names)}): pass --strategy "
        "to choose one",
        file=sys.stderr,
    )
    return 1
