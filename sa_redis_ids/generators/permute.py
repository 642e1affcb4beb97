"""A keyed, format-preserving permutation of a day's counter range (what ``secret=`` applies).

Redis keeps issuing plain counters (exhaustion, floors, reseeding and maintenance work on them
unchanged); Python maps each counter ``c`` of ``[low, high]`` to the digits it writes,
``low + P(c − low)``, where ``P`` permutes ``[0, M)`` (``M = high − low + 1``):

* a balanced Feistel network over ``Z_a × Z_a`` with ``a = ⌈√M⌉`` (so ``a² < M + 2√M + 1``, at
  most twice ``M`` for ``M ≥ 2``), `ROUNDS` rounds ``(L, R) → (R, (L + F_i(R)) mod a)``: a
  bijection of ``[0, a²)`` whatever ``F`` is;
* cycle-walking: a result outside ``[0, M)`` is encrypted again until it falls inside, which is a
  bijection of ``[0, M)`` (each cycle of the network through ``[0, M)`` is walked in order) and
  takes ``a²/M <= 2`` network passes on average;
* ``F_i(R)``: HMAC-SHA256 under a key derived from the secret, the strategy, the namespace, the
  day and the range, of ``i`` and ``R``, reduced mod ``a``. So every day has its own permutation:
  a counter seen on one day says nothing about another, and ``parse`` finds the day in the value.

The same key, namespace, day and range give the same permutation in every process and on every
machine (nothing random, no state): values parse anywhere the key is known.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from datetime import date
from math import isqrt
from typing import Any, Protocol, runtime_checkable

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.secret import Secret

ROUNDS = 10
"""Feistel rounds (as many as NIST's FF1 uses)."""

TABLE_MOST = 4096
"""Halves up to this size (counter ranges up to about 16.7 million) keep each round's values per
day as they are computed: a day's codes then cost a few list look-ups each instead of
`ROUNDS` HMACs."""

DAYS_KEPT = 4
"""Days whose permutation (and its tables) a generator keeps at once; more clear them."""


@runtime_checkable
class HiddenCounters(Protocol):
    """A date-keyed generator whose values may hide their counters (``secret=``): the value with
    the highest counter of a day is then not the day's highest value, so a floor reads every
    value of the day and asks the generator for their highest counter."""

    @property
    def secret(self) -> Secret | None:
        """The key (None: counters are written as they are)."""

    def highest_counter(self, day: date, values: Iterable[Any]) -> int:
        """The highest counter among ``values`` of ``day`` (0 when none); values that are not
        values of ``day`` cannot collide with any this generator issues and are passed over."""
        ...

    def day_bounds(self, day: date) -> tuple[Any, Any]:
        """The lowest and highest value of ``day`` (the range a floor reads)."""
        ...

    def compose(self, day: date, counter: int) -> Any:
        """The value of ``counter`` on ``day`` (as issued: hidden)."""
        ...


def hides_counters(generator: object) -> bool:
    """Whether ``generator``'s values hide their counters (a secret is set)."""
    return isinstance(generator, HiddenCounters) and generator.secret is not None


class CounterPermutation:
    """The permutations of ``[low, high]`` of one generator under ``secret``, one per day."""

    def __init__(self, secret: Secret, context: str, low: int, high: int):
        if high < low:
            raise ValueError(f"empty counter range [{low}, {high}]")
        self.secret = secret
        self.low = low
        self.high = high
        self.size = high - low + 1
        self.half = isqrt(self.size - 1) + 1
        """``a``: the Feistel network permutes ``[0, a²)``, ``a² >= size``."""
        self._context = f"{context}\x00{low}\x00{high}".encode()
        self._days: dict[date, DayPermutation] = {}

    def day(self, day: date) -> DayPermutation:
        """The permutation of ``day``, kept for the next calls; a
        [`ConfigError`][sa_redis_ids.ConfigError] when only the secret's fingerprint is known."""
        days = self._days
        found = days.get(day)
        if found is None:
            tweak = self._context + b"\x00" + day.isoformat().encode()
            key = hmac.digest(self.secret.permutation_key(), tweak, "sha256")
            found = DayPermutation(key, self.low, self.size, self.half)
            if len(days) >= DAYS_KEPT:
                days.clear()
            days[day] = found
        return found


class DayPermutation:
    """One day's bijection of ``[low, low + size)``: `encrypt` a counter, `decrypt` digits.

    With a half of at most `TABLE_MOST`, each round's values are kept in a list as they are
    computed; once every list is found full, rounds are look-ups only. Threads may compute a
    value twice, never two values (filling is idempotent), and the lists count as full only when
    a scan finds no value missing (a count that racing threads got wrong is only a hint)."""

    __slots__ = ("_full", "_inner", "_missing", "_outer", "_tables", "half", "low", "size")

    def __init__(self, key: bytes, low: int, size: int, half: int):
        self.low = low
        self.size = size
        self.half = half
        # HMAC-SHA256 (RFC 2104) with its two padded-key states hashed once per day and once per
        # round: a round then hashes only its half (the same digest as hmac.new, in half the time)
        block = key.ljust(hashlib.sha256().block_size, b"\x00")
        inner = hashlib.sha256(bytes(byte ^ 0x36 for byte in block))
        self._outer = hashlib.sha256(bytes(byte ^ 0x5C for byte in block))
        self._inner: list[Any] = []
        for i in range(ROUNDS):
            state = inner.copy()
            state.update(bytes((i,)))
            self._inner.append(state)
        tabled = half <= TABLE_MOST
        self._tables: list[list[int]] = [[-1] * half for _ in range(ROUNDS)] if tabled else []
        """Per round its values by half, -1 where not computed yet (none: every round hashes)."""
        self._missing = ROUNDS * half if tabled else 0
        """About how many round values are still to compute: when it reaches 0 the lists are
        scanned, and `_full` set if none is missing."""
        self._full = False

    def _round(self, i: int, right: int) -> int:
        """``F_i(right)``: HMAC-SHA256 of the round's byte and the half, mod ``a``."""
        inner = self._inner[i].copy()
        inner.update(right.to_bytes(8, "big"))
        outer = self._outer.copy()
        outer.update(inner.digest())
        return int.from_bytes(outer.digest()[:8], "big") % self.half

    def _value(self, i: int, right: int) -> int:
        """``F_i(right)``, kept in round ``i``'s table when there is one."""
        tables = self._tables
        if not tables:
            return self._round(i, right)
        table = tables[i]
        found = table[right]
        if found < 0:
            found = table[right] = self._round(i, right)
            self._missing -= 1
            if self._missing <= 0:
                missing = sum(each.count(-1) for each in tables)
                self._missing = missing
                self._full = missing == 0
        return found

    def _forward(self, x: int) -> int:
        half = self.half
        left, right = divmod(x, half)
        if self._full:  # every round value is kept: look-ups only
            for table in self._tables:
                left, right = right, (left + table[right]) % half
        else:
            value = self._value
            for i in range(ROUNDS):
                left, right = right, (left + value(i, right)) % half
        return left * half + right

    def _backward(self, y: int) -> int:
        half = self.half
        left, right = divmod(y, half)
        value = self._value
        for i in reversed(range(ROUNDS)):
            left, right = (right - value(i, left)) % half, left
        return left * half + right

    def encrypt(self, counter: int) -> int:
        """The digits written for ``counter`` (both in ``[low, low + size)``)."""
        x = counter - self.low
        if not 0 <= x < self.size:
            raise ValueError(
                f"counter {counter} is outside [{self.low}, {self.low + self.size - 1}]"
            )
        y = self._forward(x)
        while y >= self.size:  # cycle-walking: on average a²/size <= 2 steps in all
            y = self._forward(y)
        return self.low + y

    def encrypt_all(self, first: int, n: int, step: int) -> list[int]:
        """The digits written for counters ``first, first + step, …`` (``n`` of them)."""
        encrypt = self.encrypt
        if n == 1:
            return [encrypt(first)]
        return [encrypt(c) for c in range(first, first + n * step, step)]

    def decrypt(self, shown: int) -> int:
        """The counter whose digits are ``shown`` (`encrypt`'s inverse)."""
        y = shown - self.low
        if not 0 <= y < self.size:
            raise ValueError(f"{shown} is outside [{self.low}, {self.low + self.size - 1}]")
        x = self._backward(y)
        while x >= self.size:
            x = self._backward(x)
        return self.low + x


def counter_permutation(
    secret: Secret | None, strategy: str, namespace: str, low: int, high: int
) -> CounterPermutation | None:
    """The permutation a generator of ``strategy`` and ``namespace`` applies to its counters
    ``[low, high]`` under ``secret`` (None without one)."""
    if secret is None:
        return None
    return CounterPermutation(secret, f"{strategy}:{namespace}", low, high)


def check_key(generator: object) -> None:
    """Refuse ``generator`` for work that decodes its values (reseeding) when its values hide
    their counters and only the secret's fingerprint is known."""
    secret = generator.secret if isinstance(generator, HiddenCounters) else None
    if secret is not None and not secret.has_key:
        raise ConfigError(
            f"the values hide their counters behind the secret {secret.fingerprint}: reading "
            "them needs the key (secret=..., or --secret-env on the command line)",
            namespace=getattr(generator, "namespace", None),
        )


def require_key(permutation: CounterPermutation | None, namespace: str) -> None:
    """Refuse to issue values when only the secret's fingerprint is known (a generator rebuilt
    from the claims without the key): before any counter is taken, not after."""
    if permutation is not None and not permutation.secret.has_key:
        raise ConfigError(
            f"this generator knows only the fingerprint {permutation.secret.fingerprint} of its "
            "secret: give the key (secret=..., or --secret-env on the command line) to issue "
            "values",
            namespace=namespace,
        )
