"""Options shared by the sub-commands (``--redis-url``, ``--db-url``, ``--prefix``)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.base import MAX_BATCH
from sa_redis_ids.ids import RedisIds
from sa_redis_ids.keys import DEFAULT_PREFIX

REDIS_URL_ENV = "SA_REDIS_IDS_URL"
DB_URL_ENV = "SA_REDIS_IDS_DB_URL"


def add_redis_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--redis-url",
        action="append",
        default=None,
        metavar="URL",
        help=f"Redis URL (redis://, rediss://, unix://); repeat for N independent nodes. "
        f"Default: ${REDIS_URL_ENV}, else the embedded in-process Redis.",
    )
    parser.add_argument("--cluster", action="store_true", help="the URL names a Redis Cluster node")
    parser.add_argument(
        "--prefix", default=DEFAULT_PREFIX, help="key prefix (default: %(default)s)"
    )
    tls = parser.add_argument_group("TLS (with a rediss:// URL)")
    tls.add_argument(
        "--tls-ca-cert",
        metavar="FILE",
        help="PEM file of the certificate authority that signed the server's certificate "
        "(default: the system's)",
    )
    tls.add_argument(
        "--tls-cert", metavar="FILE", help="PEM file of this client's certificate (mutual TLS)"
    )
    tls.add_argument("--tls-key", metavar="FILE", help="PEM file of the private key of --tls-cert")


TLS_OPTIONS = {"tls_ca_cert": "ssl_ca_certs", "tls_cert": "ssl_certfile", "tls_key": "ssl_keyfile"}
"""Each TLS option of the command line and the redis-py client option it sets."""


def tls_options(args: argparse.Namespace) -> dict[str, Any]:
    """The redis-py client options (``ssl_ca_certs`` …) the TLS options name; they need a
    ``rediss://`` URL (a ``redis://`` one would silently connect without TLS)."""
    found = {
        option: getattr(args, name)
        for name, option in TLS_OPTIONS.items()
        if getattr(args, name, None) is not None
    }
    if found and any(not url.startswith("rediss://") for url in redis_urls(args)):
        flags = ", ".join(
            "--" + name.replace("_", "-") for name in TLS_OPTIONS if getattr(args, name, None)
        )
        raise UsageError(f"{flags} need rediss:// URLs (TLS); a redis:// URL connects without TLS")
    if getattr(args, "tls_key", None) and not getattr(args, "tls_cert", None):
        raise UsageError("--tls-key is the key of --tls-cert: give both")
    return found


def add_db_option(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--db-url",
        default=os.environ.get(DB_URL_ENV) or default,
        metavar="URL",
        help=f"SQLAlchemy database URL (default: ${DB_URL_ENV}, else {default})",
    )


class UsageError(Exception):
    """A command used in a way it refuses (not a library error): one line and exit status 2."""


def redis_urls(args: argparse.Namespace) -> list[str]:
    """The Redis URLs the options name (``--redis-url``, else ``$SA_REDIS_IDS_URL``); none means
    the embedded Redis."""
    urls: list[str] = args.redis_url or (
        [os.environ[REDIS_URL_ENV]] if os.environ.get(REDIS_URL_ENV) else []
    )
    return urls


def add_embedded_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--embedded",
        action="store_true",
        help="act on the embedded in-process Redis even so (it starts empty and is gone when "
        "the command exits: only for trying the command out)",
    )


def refuse_embedded(args: argparse.Namespace, ids: RedisIds, command: str) -> None:
    """A command that changes Redis for later runs (``maintain``, ``reseed``) refuses the embedded
    Redis, which is new and empty at every run and gone at its end, unless ``--embedded``."""
    if args.embedded or not all(node.name == "embedded" for node in ids.nodes.nodes):
        return
    what = (
        "the application's RedisIds (--app) is the embedded in-process Redis"
        if getattr(args, "app", None)
        else "no --redis-url given, so this would act on the embedded in-process Redis"
    )
    raise UsageError(
        f"{command}: {what}, which starts empty and is gone at exit; give --redis-url URL "
        f"(or ${REDIS_URL_ENV}), or --embedded to do it anyway"
    )


def redis_ids_from(args: argparse.Namespace) -> RedisIds:
    """The ``RedisIds`` the options name: one URL, several, or the embedded Redis (``--embedded``
    always means the embedded Redis: ``$SA_REDIS_IDS_URL`` is not read, ``--redis-url`` refused)."""
    if getattr(args, "embedded", False):
        if args.redis_url:
            raise ConfigError(
                "--embedded acts on the embedded in-process Redis; leave out --redis-url"
            )
        return RedisIds.embedded(prefix=args.prefix)
    urls = redis_urls(args)
    tls = tls_options(args)
    if len(urls) > 1:
        return RedisIds.from_urls(urls, prefix=args.prefix, **tls)
    if urls:
        return RedisIds.from_url(urls[0], prefix=args.prefix, cluster=args.cluster, **tls)
    return RedisIds.embedded(prefix=args.prefix)


def _int_at_least(text: str, low: int, high: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{value} must be {low} or more")
    if high is not None and value > high:
        raise argparse.ArgumentTypeError(f"{value} is more than {high}, the most one call takes")
    return value


def count(text: str) -> int:
    """argparse type: how many values, from 1 to what one ``next_ids`` call may take."""
    return _int_at_least(text, 1, MAX_BATCH)


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: an integer of at least 0."""
    return _int_at_least(text, 0)
