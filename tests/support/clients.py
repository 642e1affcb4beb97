"""Clients for tests that must prove nothing reaches Redis."""

from __future__ import annotations

from typing import Any

import redis


class Untouchable(redis.Redis):
    """A redis-py client (with a socket timeout, so no warning) that fails the test if any
    command is sent through it."""

    def __init__(self) -> None:
        super().__init__(host="127.0.0.1", port=1, socket_timeout=1, socket_connect_timeout=1)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        raise AssertionError(f"Redis was touched: {args[:1]}")
