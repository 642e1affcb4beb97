"""Key naming: every key is ``{prefix}:{{{namespace}}}:{part}``.

The namespace sits inside braces, a Redis Cluster *hash tag*, so every key of one namespace hashes to
the same slot and one Lua script may touch all of them on a cluster. Namespaces and prefixes are
validated here, before any command is sent.
"""

from __future__ import annotations

import re

from sa_redis_ids.errors import ConfigError

DEFAULT_PREFIX = "sa_redis_ids"
MAX_NAMESPACE_LENGTH = 100
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


def validate_namespace(namespace: object) -> str:
    """Return ``namespace`` if it is 1–100 characters of letters, digits, ``_ . -``; else raise."""
    if not isinstance(namespace, str):
        raise ConfigError(f"namespace must be a str, not {type(namespace).__name__}")
    if not namespace:
        raise ConfigError("namespace must not be empty")
    if len(namespace) > MAX_NAMESPACE_LENGTH:
        raise ConfigError(
            f"namespace is {len(namespace)} characters long; at most {MAX_NAMESPACE_LENGTH} fit",
            namespace=namespace[:20] + "…",
        )
    if not _NAME.fullmatch(namespace):
        raise ConfigError(
            f"namespace {namespace!r} may only hold letters, digits, '_', '.' and '-'"
        )
    return namespace


def validate_prefix(prefix: object) -> str:
    """Return ``prefix`` if it is a non-empty name of the same alphabet as namespaces (plus ``:``)."""
    if not isinstance(prefix, str) or not re.fullmatch(r"[A-Za-z0-9_.:\-]{1,100}", prefix):
        raise ConfigError(
            f"key prefix {prefix!r} must be 1–100 letters, digits, '_', '.', ':' or '-'"
        )
    return prefix


class KeySpace:
    """The keys of one namespace under one prefix, all sharing the namespace's hash tag."""

    def __init__(self, prefix: str, namespace: str):
        self.prefix = validate_prefix(prefix)
        self.namespace = validate_namespace(namespace)
        self.base = f"{self.prefix}:{{{self.namespace}}}"

    def key(self, *parts: str) -> str:
        """The key ``prefix:{namespace}:part1:part2…``."""
        return ":".join((self.base, *parts))

    @property
    def node_claim(self) -> str:
        """Where each node records which index of how many nodes it serves for this namespace."""
        return self.key("node")

    def __repr__(self) -> str:
        return f"KeySpace({self.base!r})"
