"""``secret=``: the key that hides a day's counters in daily codes and date-prefixed IDs.

A plain ``IS202611270042`` tells everyone it was the 42nd order of the day. Given a key, the
generator maps each day's counter through a keyed permutation of the counter's digit range (see
[`permute`][sa_redis_ids.generators.permute]) before it writes the digits: the code keeps its width
and format, and stays unique, but neighbouring calls are far apart and nobody without the key can
tell the day's volume. The holder of the key gets the counter back with ``parse``.

```python
codes = ids.daily_code("orders", secret=os.environ["ORDER_CODE_KEY"])
```

The key is bytes, or a str taken as its UTF-8 bytes, at least `MIN_KEY_BYTES` long: make it
with ``python -c "import secrets; print(secrets.token_hex(32))"`` and keep it where the
application keeps its other secrets. `Secret` wraps one (``Secret.from_env("ORDER_CODE_KEY")``)
and never shows it: its ``repr`` and the claim a node records hold only its `fingerprint`,
which changes with the key, so an application started with another key is refused at its first
call instead of issuing codes that another key already gave.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import re

from sa_redis_ids.errors import ConfigError

MIN_KEY_BYTES = 16
"""The shortest key taken (128 bits): the fingerprint a node records must not let anyone find
the key by trying likely ones."""

ENV = "SA_REDIS_IDS_SECRET"
"""The environment variable `Secret.from_env` reads by default."""

FINGERPRINT = re.compile(r"fp-[0-9a-f]{16}")
"""A fingerprint as recorded: ``fp-`` and 16 hex digits (64 bits of HMAC-SHA256 of the key)."""

_FINGERPRINT_INFO = b"sa_redis_ids secret fingerprint v1"
_PERMUTATION_INFO = b"sa_redis_ids counter permutation v1"


class Secret:
    """A key for ``secret=``, or (`recorded`) the fingerprint of one without the key.

    Two secrets are equal when their fingerprints are: a key and the fingerprint a node
    records of it compare equal, another key does not. The key itself is never shown.
    """

    __slots__ = ("_key", "fingerprint")

    def __init__(self, key: bytes | str):
        if isinstance(key, str):
            raw = key.encode("utf-8")
        elif isinstance(key, bytes):
            raw = key
        else:
            raise ConfigError(f"secret must be bytes, a str or a Secret, not {type(key).__name__}")
        if len(raw) < MIN_KEY_BYTES:
            raise ConfigError(
                f"secret is {len(raw)} bytes long; a key needs at least {MIN_KEY_BYTES} random "
                'bytes: make one with python -c "import secrets; print(secrets.token_hex(32))"'
            )
        self._key: bytes | None = raw
        self.fingerprint: str = fingerprint_of(raw)
        """``fp-`` and 16 hex digits: what a node's claim records of the key."""

    @classmethod
    def from_env(cls, name: str = ENV) -> Secret:
        """The key held by environment variable ``name`` (its text, as UTF-8 bytes)."""
        value = os.environ.get(name)
        if not value:
            raise ConfigError(f"the environment variable {name} holding the secret is not set")
        return cls(value)

    @classmethod
    def recorded(cls, fingerprint: str) -> Secret:
        """A secret known only by its fingerprint (as a node's claim records it): enough to
        purge, pre-create days and check claims, not to issue or decode values."""
        if not isinstance(fingerprint, str) or not FINGERPRINT.fullmatch(fingerprint):
            raise ConfigError(f"{fingerprint!r} is not a secret's fingerprint (fp-<16 hex digits>)")
        found = cls.__new__(cls)
        found._key = None
        found.fingerprint = fingerprint
        return found

    @property
    def has_key(self) -> bool:
        """Whether the key is known (False for a `recorded` fingerprint)."""
        return self._key is not None

    def permutation_key(self) -> bytes:
        """The key of the counter permutation, derived from the secret (never the key itself,
        so the fingerprint and the permutation use independent keys)."""
        if self._key is None:
            raise ConfigError(
                f"only the fingerprint {self.fingerprint} of the secret is known here; issuing "
                "or decoding values needs the key itself (secret=..., or --secret-env on the "
                "command line)"
            )
        return hmac.digest(self._key, _PERMUTATION_INFO, "sha256")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return self.fingerprint == other.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        held = "" if self.has_key else ", key unknown"
        return f"Secret(fingerprint={self.fingerprint!r}{held})"


def fingerprint_of(key: bytes) -> str:
    """``fp-`` and the first 16 hex digits of HMAC-SHA256 of a fixed text under ``key``."""
    return "fp-" + hmac.new(key, _FINGERPRINT_INFO, hashlib.sha256).hexdigest()[:16]


def check_secret(secret: object) -> Secret | None:
    """``secret=`` as a `Secret` (None: none given); [`ConfigError`][sa_redis_ids.ConfigError]
    for another type or a key that is too short."""
    if secret is None or isinstance(secret, Secret):
        return secret
    if isinstance(secret, (bytes, str)):
        return Secret(secret)
    raise ConfigError(f"secret must be bytes, a str or a Secret, not {type(secret).__name__}")


def secret_option(text: str) -> Secret:
    """The command line's ``--secret-env NAME``: the key held by environment variable ``NAME``.

    A recorded claim gives the fingerprint instead (``fp-…``, which no variable name spells):
    the secret known by it alone."""
    if FINGERPRINT.fullmatch(text):
        return Secret.recorded(text)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not the name of an environment variable (the key is read from it, "
            "never given on the command line)"
        )
    try:
        return Secret.from_env(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
