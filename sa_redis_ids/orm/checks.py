"""Column checks: can this column hold every value this generator can produce, on this database?

A generator knows its ``python_type``, ``max_value`` and ``max_length`` at construction; a column
knows its type. The check runs when mappers configure (no database known yet) and again, once per
dialect, before the first insert on a connection. What a type holds:

- ``SmallInteger`` 16 bits, ``Integer`` 32 bits, ``BigInteger`` 64 bits (MySQL ``TINYINT`` 8,
  ``MEDIUMINT`` 24; ``unsigned`` doubles the range). SQLite stores every ``INTEGER`` in 64 bits and
  Oracle's ``INTEGER`` is ``NUMBER(38)``, so a plain ``Integer`` is judged only once the dialect is
  known (at mapping time it is neither accepted nor refused). ``SmallInteger`` declares 16 bits and
  is held to it everywhere.
- ``Numeric(p, s)`` holds ``p − s`` integer digits; without a precision, MySQL/MariaDB default to
  ``DECIMAL(10, 0)`` and SQL Server to 18 digits, PostgreSQL and SQLite are unbounded.
- ``String(n)`` holds ``n`` characters; ``String()`` and ``Text`` are unbounded. ``Enum`` holds
  nothing a generator makes.
- ``Float``/``Double`` never hold IDs (binary floating point loses digits), and the Python type
  must match: a code (``str``) cannot go into a number column, nor a number into a string column.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from sqlalchemy import types as sqltypes
from sqlalchemy.engine import Dialect, make_url

from sa_redis_ids.bounds import BIGINT_MAX
from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.aio import AsyncIdGenerator
from sa_redis_ids.generators.base import IdGenerator

INTEGER_BITS = {"TINYINT": 8, "SMALLINT": 16, "MEDIUMINT": 24, "INTEGER": 32, "BIGINT": 64}
"""Widths of integer types by their SQL name (the MySQL-only ones included)."""

PLAIN_INTEGER_DIGITS = {"oracle": 38}
"""Dialects whose plain ``INTEGER`` is a decimal number of this many digits."""

PLAIN_INTEGER_BITS = {"sqlite": 64}
"""Dialects whose plain ``INTEGER`` is wider than 32 bits."""

NUMERIC_DEFAULT_DIGITS = {"mysql": 10, "mariadb": 10, "mssql": 18}
"""Integer digits of a ``Numeric()`` without precision, where the dialect bounds it."""


@dataclass(frozen=True)
class Holds:
    """What a column type holds on one dialect (``None`` limits mean unbounded)."""

    kind: str
    """``"int"``, ``"str"``, or ``"other"`` (floating point, binary, enum, …)."""
    type_name: str
    max_int: int | None = None
    max_length: int | None = None
    depends_on_dialect: bool = False
    """The width is only known once the dialect is: the mapping-time check skips it."""


def as_dialect(dialect: Dialect | str | None) -> Dialect | None:
    """A dialect instance for ``dialect`` (a name like ``"postgresql"`` loads that dialect)."""
    if isinstance(dialect, str):
        return _named_dialect(dialect)
    return dialect


@functools.cache
def _named_dialect(name: str) -> Dialect:
    try:
        found: Dialect = make_url(f"{name}://").get_dialect()()
    except Exception as exc:
        raise ValueError(f"{name!r} is not the name of a SQLAlchemy dialect: {exc}") from None
    return found


def dialect_names(dialect: Dialect | str | None) -> tuple[str, ...]:
    """The names ``dialect`` answers to, the most specific first (MariaDB reached through a
    ``mysql://`` URL answers to both ``mariadb`` and ``mysql``)."""
    if dialect is None:
        return ()
    if isinstance(dialect, str):
        return (dialect,)
    if getattr(dialect, "is_mariadb", False):
        return ("mariadb", "mysql")
    return (dialect.name,)


def dialect_key(dialect: Dialect | str | None) -> str:
    """One name per dialect for "checked once per dialect" (``""`` for mapping time)."""
    names = dialect_names(dialect)
    return names[0] if names else ""


def _type_dialect(type_: Any) -> str | None:
    """``"mysql"`` for ``sqlalchemy.dialects.mysql.INTEGER``; ``None`` for generic types."""
    parts = type(type_).__module__.split(".")
    return parts[2] if parts[:2] == ["sqlalchemy", "dialects"] and len(parts) > 2 else None


def resolve_type(type_: Any, dialect: Dialect | None) -> Any:
    """The type actually used on ``dialect``: what SQLAlchemy's own ``dialect_impl`` makes of it
    (its variant for that dialect, the dialect's implementation class), ``TypeDecorator``s
    unwrapped through ``load_dialect_impl``. Without a dialect (mapping time), ``TypeDecorator``s
    are unwrapped to their ``impl``."""
    for _ in range(20):  # a TypeDecorator chain is short; the bound guards against cycles
        if dialect is not None:
            type_ = type_.dialect_impl(dialect)
        if not isinstance(type_, sqltypes.TypeDecorator):
            return type_
        type_ = type_.impl if dialect is None else type_.load_dialect_impl(dialect)
    return type_


def _sql_name(type_: Any, dialect: Dialect | None) -> str:
    try:
        return str(type_.compile(dialect=dialect))
    except Exception:  # a type only some dialect can render
        return type(type_).__name__.upper()


def holds(type_: Any, dialect: Dialect | str | None) -> Holds:
    """What ``type_`` holds on ``dialect`` (``None``: the judgement that holds on every dialect)."""
    names = dialect_names(dialect)
    instance = as_dialect(dialect)
    type_ = resolve_type(type_, instance)
    name = _sql_name(type_, instance)
    on = _type_dialect(type_) or (names[0] if names else None)
    if isinstance(type_, sqltypes.Integer):
        return _integer_holds(type_, name, on)
    if isinstance(type_, sqltypes.Numeric) and not isinstance(type_, sqltypes.Float):
        return _numeric_holds(type_, name, on)
    if isinstance(type_, sqltypes.Enum):
        return Holds("other", name)
    if isinstance(type_, sqltypes.String):
        return Holds("str", name, max_length=type_.length)
    try:
        python_type = type_.python_type
    except NotImplementedError:
        return Holds("other", name)
    if python_type is int:
        return Holds("int", name)
    if python_type is str:
        return Holds("str", name)
    return Holds("other", name)


def _integer_holds(type_: Any, name: str, on: str | None) -> Holds:
    unsigned = bool(getattr(type_, "unsigned", False))
    sql = type(type_).__name__.upper()
    if isinstance(type_, sqltypes.BigInteger):
        bits = 64
    elif isinstance(type_, sqltypes.SmallInteger):
        bits = 16
    elif sql in INTEGER_BITS and sql != "INTEGER":
        bits = INTEGER_BITS[sql]
    elif on is None:
        return Holds("int", name, depends_on_dialect=True)
    elif on in PLAIN_INTEGER_DIGITS:
        return Holds("int", name, max_int=10 ** PLAIN_INTEGER_DIGITS[on] - 1)
    else:
        bits = PLAIN_INTEGER_BITS.get(on, 32)
    top = 2**bits - 1 if unsigned else 2 ** (bits - 1) - 1
    return Holds("int", name, max_int=top)


def _numeric_holds(type_: Any, name: str, on: str | None) -> Holds:
    if type_.precision is not None:
        digits = type_.precision - (type_.scale or 0)
        return Holds("int", name, max_int=10**digits - 1 if digits > 0 else 0)
    if on is None:
        return Holds("int", name, depends_on_dialect=True)
    digits = NUMERIC_DEFAULT_DIGITS.get(on)
    return Holds("int", name, max_int=None if digits is None else 10**digits - 1)


def what_fits(generator: IdGenerator[Any]) -> str:
    """The column type to suggest for ``generator``."""
    if generator.python_type is str:
        return f"String({generator.max_length})"
    if generator.max_value <= 2**31 - 1:
        return "Integer or BigInteger"
    if generator.max_value <= BIGINT_MAX:
        return "BigInteger"
    return f"Numeric({len(str(generator.max_value))}, 0)"


def check_column(
    generator: IdGenerator[Any] | AsyncIdGenerator[Any],
    column: Any,
    dialect: Dialect | str | None = None,
    *,
    owner: str | None = None,
) -> None:
    """Raise [`ConfigError`][sa_redis_ids.ConfigError] unless ``column`` holds every value ``generator`` can produce.

    ``dialect`` ``None`` is the mapping-time check: widths that depend on the dialect are skipped.
    ``owner`` names the mapped attribute (``"Order.id"``) for the message. An ``AsyncIdGenerator``
    is judged by the generator it wraps.
    """
    if isinstance(generator, AsyncIdGenerator):
        generator = generator.generator
    found = holds(column.type, dialect)
    problem = _problem(generator, found)
    if problem is None:
        return
    table = getattr(getattr(column, "table", None), "name", None)
    where = f"column {table}.{column.name}" if table else f"column {column.name}"
    names = dialect_names(dialect)
    on = f" on {names[0]}" if names else ""
    subject = (
        f"{owner} ({where}, {found.type_name}{on})" if owner else f"{where} ({found.type_name}{on})"
    )
    raise ConfigError(
        f"{subject} cannot hold the IDs of {generator!r}: {problem}; "
        f"a column that fits: {what_fits(generator)}",
        namespace=generator.namespace,
    )


def _problem(generator: IdGenerator[Any], found: Holds) -> str | None:
    """Why ``found`` cannot hold the generator's values, or ``None`` when it can (or cannot tell)."""
    if generator.python_type is str:
        if found.kind != "str":
            return f"its values are strings (codes) but {found.type_name} is not a string type"
        if found.max_length is not None and generator.max_length > found.max_length:
            return (
                f"its codes are up to {generator.max_length} characters long but "
                f"{found.type_name} holds at most {found.max_length}"
            )
        return None
    if found.kind != "int":
        return f"its values are integers but {found.type_name} is not an integer type"
    if found.max_int is not None and generator.max_value > found.max_int:
        return (
            f"its values go up to {generator.max_value} ({len(str(generator.max_value))} digits) "
            f"but {found.type_name} holds at most {found.max_int}"
        )
    return None
