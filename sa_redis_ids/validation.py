"""The checks every public entry runs on its arguments before anything reaches Redis.

Each check names the option and what would fit, and raises [`ConfigError`][sa_redis_ids.ConfigError] (a
``ValueError``) for a configuration option, or a plain ``ValueError`` for a value passed to a
method (``parse``, ``precreate``…). ``bool`` is never accepted where a number is asked for, and
numbers of seconds must be finite: ``inf`` and ``nan`` would turn into a wait that never ends or a
comparison that is always false.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import date, datetime
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from sa_redis_ids.errors import ConfigError

MAX_DB = 2**31 - 2
"""The highest database index a Redis server can have (``databases`` is at most INT_MAX)."""

SCHEMES = ("redis://", "rediss://", "unix://")


def check_bool(name: str, value: object) -> bool:
    """``True`` or ``False`` only: ``"yes"``, ``None``, ``0`` or ``1`` raise [`ConfigError`][sa_redis_ids.ConfigError]."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, not {value!r}")
    return value


def check_int_option(name: str, value: object, *, low: int, high: int) -> int:
    """An int from ``low`` to ``high`` (bool refused), else [`ConfigError`][sa_redis_ids.ConfigError]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ConfigError(f"{name}={value} is out of range; it must be from {low} to {high}")
    return value


def check_seconds(
    name: str,
    value: object,
    *,
    low: float = 0.0,
    inclusive: bool = False,
    high: float | None = None,
) -> float:
    """A finite number of seconds above ``low`` (or at it, with ``inclusive``), at most ``high``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number of seconds, not {value!r}")
    if value < low or (not inclusive and value == low):
        relation = "at least" if inclusive else "more than"
        raise ConfigError(f"{name}={value} is out of range; it must be {relation} {low} s")
    if high is not None and value > high:
        raise ConfigError(f"{name}={value} is out of range; it must be at most {high} s")
    return float(value)


def check_share(name: str, value: object, *, low: float, high: float, low_open: bool) -> float:
    """A finite number in ``(low, high]`` (``low_open``) or ``(low, high)``, else ConfigError."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and low < value
        and (value <= high if low_open else value < high)
    )
    if not ok:
        upper = "]" if low_open else ")"
        raise ConfigError(f"{name}={value!r} must be a number in ({low}, {high}{upper}")
    return float(value)  # type: ignore[arg-type]


def check_value_int(name: str, value: object, *, low: int, high: int) -> int:
    """An int argument of a method from ``low`` to ``high``, else ``TypeError``/``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name}={value} is out of range; it must be from {low} to {high}")
    return value


def check_day(name: str, value: object, *, first: date, last: date) -> date:
    """A `date` (a ``datetime`` counts as its date) from ``first`` to ``last``."""
    if isinstance(value, datetime):
        value = value.date()
    if not isinstance(value, date):
        raise TypeError(f"{name} must be a datetime.date such as date(2026, 11, 22), not {value!r}")
    if not first <= value <= last:
        raise ValueError(f"{name}={value} is out of range; it must be from {first} to {last}")
    return value


def check_values(name: str, values: object) -> list[Any]:
    """The items of an iterable of values (a list, set, range…); a lone value or a str raises."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be an iterable of values such as [12345678], not {values!r}")
    return list(values)


def redacted(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for error messages).

    Everything between the scheme and the last ``@`` is taken for user and password, whatever
    it holds (a password with an unencoded ``#`` or ``/`` must not leak through a parse error).
    """
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.partition(":")[0] if ":" in credentials else ""
    return (
        f"{scheme}://{user}:***@{host}" if user or ":" in credentials else f"{scheme}://***@{host}"
    )


def check_redis_url(url: object) -> str:
    """A ``redis://``, ``rediss://`` or ``unix://`` URL whose host, port and db make sense.

    redis-py would take ``redis://host/abc`` as database 0 and ``redis://`` as localhost; here
    they raise [`ConfigError`][sa_redis_ids.ConfigError], as do a port outside 1–65535 and a db outside 0–2^31−2.
    """
    if not isinstance(url, str) or not url.startswith(SCHEMES):
        shown = redacted(url) if isinstance(url, str) else repr(url)
        raise ConfigError(f"Redis URL {shown!r} must start with one of {', '.join(SCHEMES)}")
    shown = redacted(url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"Redis URL {shown!r}: {exc}; a port is 1 to 65535") from None
    query = parse_qs(parts.query)
    dbs = query.get("db", [])
    if parts.scheme == "unix":
        if not parts.path:
            raise ConfigError(
                f"Redis URL {shown!r} names no socket path; use unix:///path/to/redis.sock"
            )
    else:
        if not parts.hostname:
            raise ConfigError(
                f"Redis URL {shown!r} names no host; use redis://HOST:PORT/DB, e.g. "
                "redis://localhost:6379/0"
            )
        if port == 0:
            raise ConfigError(f"Redis URL {shown!r}: port 0 is not a port; use 1 to 65535")
        path = unquote(parts.path).strip("/")
        if path:
            dbs = [path, *dbs]
    for db in dbs:
        if not db.isascii() or not db.isdigit() or int(db) > MAX_DB:
            raise ConfigError(
                f"Redis URL {shown!r}: db {db!r} is not a database index; use an int from 0 "
                f"to {MAX_DB}, e.g. redis://localhost:6379/0"
            )
    return url
