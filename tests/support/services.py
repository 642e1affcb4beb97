"""Deciding what a test does when a service it needs is missing: skip on a laptop, fail in CI."""

from __future__ import annotations

import os
import shutil
import socket
from typing import NoReturn

import pytest

REQUIRE_ENV = "SA_REDIS_IDS_REQUIRE_SERVICES"

REDIS_URL = os.environ.get("SA_REDIS_IDS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get(
    "SA_REDIS_IDS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
MARIADB_URL = os.environ.get(
    "SA_REDIS_IDS_TEST_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306/test"
)


def services_required() -> bool:
    return os.environ.get(REQUIRE_ENV) == "1"


def missing(reason: str) -> NoReturn:
    """Skip with ``reason``, or fail when the environment demands real services."""
    if services_required():
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1, so this is a failure)", pytrace=False)
    pytest.skip(reason)


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not installed")
    return path
