"""The documentation site builds with MkDocs in strict mode (a warning fails the build), and the
README stays a short front page that links into it."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PYPROJECT = ROOT / "pyproject.toml"
DEMO_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[all]' && .venv/bin/sa-redis-ids demo"
)
TEST_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[all,test]' && "
    ".venv/bin/python -m pytest -n auto --dist loadfile"
)


def require(module: str) -> None:
    """Skip without the docs tools, unless the services are required (then they must be here)."""
    if importlib.util.find_spec(module) is not None:
        return
    if os.environ.get("SA_REDIS_IDS_REQUIRE_SERVICES"):
        pytest.fail(f"{module} is not importable: install the docs extra (it is in the test extra)")
    pytest.skip(f"{module} is not installed (pip install -e '.[docs]')")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``mkdocs build --strict`` makes it (built once for this module's tests)."""
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        require(module)
    out = tmp_path_factory.mktemp("site") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    return out


def site_pages(site: Path) -> list[Path]:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 30, "the site has fewer pages than its navigation"
    return pages


def test_the_site_builds_strictly(site: Path) -> None:
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    for name in ("RedisIds", "from_sentinel", "date_prefixed", "floor_from_column"):
        assert name in reference, f"the API reference lacks {name}"


REST_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|exc|data|obj):`?")


def test_the_api_reference_renders_docstrings_not_rest(site: Path) -> None:
    """Docstrings are Markdown: no reStructuredText role shows as text, cross-references are
    links, and the package docstring's example is a code block, not a nest of quotes."""
    for page in site_pages(site):
        text = page.read_text(encoding="utf-8")
        found = REST_ROLE.search(text)
        assert found is None, f"{page.relative_to(site)} shows {found and found.group()!r}"
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    assert re.search(r'<a [^>]*href="[^"]*#sa_redis_ids\.RedisIds"', reference), "no link"
    blocks = re.findall(r'<div class="[^"]*highlight"><pre>.*?</pre></div>', reference, re.S)
    assert any(
        '<span class="gp">&gt;&gt;&gt; </span>' in block and "embedded" in block for block in blocks
    ), "the package docstring's example is not a code block with its prompts"
    assert "<blockquote>" not in reference


def test_the_package_docstrings_example_runs() -> None:
    import doctest

    import sa_redis_ids

    result = doctest.testmod(sa_redis_ids, verbose=False)
    assert result.attempted >= 4 and result.failed == 0, result


class _Requests(HTMLParser):
    """The addresses a browser fetches while it renders a page (not the links a reader follows)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_style = tag == "style"
        values = {name: value or "" for name, value in attrs}
        if tag == "link" and values.get("rel") != "canonical":  # canonical: the page's own name
            self.urls.append(values.get("href", ""))
        if tag in ("script", "img", "iframe", "source", "audio", "video", "embed"):
            self.urls.extend([values.get("src", ""), *values.get("srcset", "").split()[::2]])
        self.urls.extend(CSS_URL.findall(values.get("style", "")))

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.urls.extend(CSS_URL.findall(data))


CSS_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])([^'")\s]+)""")


def test_the_site_requests_nothing_from_another_host(site: Path) -> None:
    """The site works offline and tells no third party who reads it: no web fonts, scripts,
    images or styles from any other host, in the pages or in the stylesheets."""
    own = urlsplit(site_url()).hostname
    fetched: dict[str, str] = {}
    for page in site_pages(site):
        parser = _Requests()
        parser.feed(page.read_text(encoding="utf-8"))
        for url in parser.urls:
            if url:
                fetched.setdefault(url, str(page.relative_to(site)))
    for sheet in site.rglob("*.css"):
        for url in CSS_URL.findall(sheet.read_text(encoding="utf-8")):
            fetched.setdefault(url, str(sheet.relative_to(site)))
    assert fetched, "the parser found no requests at all: it is not reading the pages"
    foreign = {
        url: where
        for url, where in fetched.items()
        if urlsplit(url).scheme in ("http", "https", "")
        and urlsplit(url).netloc
        and urlsplit(url).hostname != own
    }
    assert foreign == {}, foreign


def site_url() -> str:
    found = re.search(r"^site_url:\s*(\S+)$", (ROOT / "mkdocs.yml").read_text("utf-8"), re.M)
    assert found, "mkdocs.yml sets no site_url (the sitemap and canonical links need it)"
    return found.group(1)


def test_the_sitemap_lists_the_pages_under_the_site_url(site: Path) -> None:
    sitemap = (site / "sitemap.xml").read_text(encoding="utf-8")
    assert f"<loc>{site_url()}quickstart/</loc>" in sitemap
    assert f"<loc>{site_url()}choosing/</loc>" in sitemap


FENCE = re.compile(r"^([ \t]*)(```+|~~~+)([^\n]*)\n(.*?)^\1\2[ \t]*$", re.M | re.S)
CODE_COLUMNS = 88
"""How wide a code line on the site may be before the column cuts it off or scrolls."""


def test_the_pages_code_blocks_fit_the_column() -> None:
    too_wide = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        blocks = FENCE.findall(text)
        for indent, _fence, _info, body in blocks:
            for line in body.splitlines():
                if len(line) - len(indent) > CODE_COLUMNS:
                    too_wide.append(f"{page.relative_to(ROOT)}: {line.strip()[:60]}")
    assert too_wide == [], "\n".join(too_wide)


def test_the_readme_is_a_short_front_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    assert DEMO_COMMAND in text.splitlines()
    assert TEST_COMMAND in text.splitlines()
    for word in ("seed 0", "the issue", "issue #", "benchmark log"):
        assert word not in text.lower(), f"the README speaks of {word!r}"


def test_the_ci_runs_the_readmes_test_command() -> None:
    assert TEST_COMMAND in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()


def project_urls() -> dict[str, str]:
    section = re.search(r"^\[project\.urls\]\n(.*?)^\[", PYPROJECT.read_text("utf-8"), re.M | re.S)
    assert section, "pyproject.toml has no [project.urls]"
    return dict(re.findall(r'^(\w+) = "([^"]+)"$', section.group(1), re.M))


def repository_file(url: str) -> Path:
    """The file of this checkout that a URL into the repository (``Source``) shows."""
    source = project_urls()["Source"].rstrip("/")
    found = re.fullmatch(re.escape(source) + r"(?:/(?:blob|tree)/main/([^#?]+))?/?(?:#.*)?", url)
    assert found, f"{url} does not lead into the repository {source}"
    return ROOT / (found.group(1) or ".")


def test_the_readme_links_into_the_repository_so_they_work_on_a_package_index() -> None:
    """The README is also the package's description on the index, where relative links lead
    nowhere. Until a documentation site is hosted, it links to the pages in the repository
    (every one a file of this checkout) and says how to build and serve the site locally; the
    package's project URLs lead into the repository too, not to a site that does not exist."""
    text = README.read_text(encoding="utf-8")
    relative = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+://", t)]
    assert relative == [], f"relative links in the README: {relative}"
    defined = dict(re.findall(r"^\[([^\]]+)\]:\s*(\S+)\s*$", text, re.M))
    used = set(re.findall(r"\]\[([^\]]+)\]", text))
    assert used and used <= set(defined), f"undefined references: {used - set(defined)}"
    links = [*defined.values(), *re.findall(r"\]\((\S+?)\)", text)]
    pages = [repository_file(url) for url in links if "/docs/" in url]
    assert len(pages) >= 18
    for page in pages:
        assert page.is_file() and page.suffix == ".md", page
    assert repository_file(defined["choosing"]) == ROOT / "docs" / "choosing.md"
    assert repository_file(defined["changelog"]) == ROOT / "CHANGELOG.md"
    assert "mkdocs serve" in text and "'.[docs]'" in text, "the README says how to read the docs"
    urls = project_urls()
    assert {"Homepage", "Documentation", "Source", "Changelog"} <= set(urls)
    assert "readthedocs" not in " ".join(urls.values()), "no hosted site exists yet"
    assert repository_file(urls["Homepage"]) == ROOT
    assert repository_file(urls["Documentation"]) == ROOT / "docs"
    assert repository_file(urls["Changelog"]) == ROOT / "CHANGELOG.md"


def test_the_readmes_and_pages_links_lead_somewhere() -> None:
    sources = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    for source in sources:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", source.read_text("utf-8")):
            if re.match(r"[a-z]+://", target):
                continue
            assert (source.parent / target).exists(), f"{source.name} links to missing {target}"


def pytest_command() -> str:
    """The ``pytest`` command of this environment (as a user types it, not ``python -m``)."""
    command = Path(sys.executable).with_name("pytest")
    assert command.exists(), f"no pytest command beside {sys.executable}"
    return str(command)


TITLED_BLOCK = re.compile(r'^```\w+ title="([^"]+)"\n(.*?)^```$', re.M | re.S)


def test_the_testing_pages_suite_runs_with_the_plugin(tmp_path: Path) -> None:
    """The files shown on the testing page (```` ```py title="path" ````) are a suite of their
    own: written out as shown, they pass under plain ``pytest`` (the command, which unlike
    ``python -m pytest`` puts no project folder on ``sys.path``) with only the plugin's
    fixtures, and never reach the application's Redis (its URL is a closed port)."""
    files = TITLED_BLOCK.findall((ROOT / "docs" / "testing.md").read_text(encoding="utf-8"))
    paths = {path for path, _ in files}
    assert paths >= {"myapp/ids.py", "tests/test_ids.py", "pyproject.toml"}
    for path, source in files:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(source, encoding="utf-8")
    (tmp_path / "myapp" / "__init__.py").touch()
    env = {**os.environ, "MYAPP_REDIS_URL": "redis://127.0.0.1:1/0"}
    env.pop("PYTHONPATH", None)
    env.pop("PYTEST_ADDOPTS", None)
    ran = subprocess.run(
        [pytest_command(), "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "6 passed" in ran.stdout, ran.stdout


def test_no_page_speaks_of_the_projects_history() -> None:
    for page in [README, *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8").lower()
        assert not re.search(r"\bseed 0\d\d\b", text), page


RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.M)


def test_the_changelog_dates_the_packages_version_and_repeats_no_line() -> None:
    """The version is written once (``__version__``, which the package metadata reads), and the
    changelog has a dated section for it below ``[Unreleased]``; every release is dated and
    none lists one change twice."""
    import sa_redis_ids

    pyproject = PYPROJECT.read_text(encoding="utf-8")
    assert (
        'dynamic = ["version"]' in pyproject and "\nversion = " not in pyproject.split("[tool")[0]
    )
    assert 'version = { attr = "sa_redis_ids.__version__" }' in pyproject
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[0] == "[Unreleased]", headings
    releases = RELEASE.findall(text)
    assert [f"[{version}] - {day}" for version, day in releases] == headings[1:], "undated"
    assert releases[0][0] == sa_redis_ids.__version__
    assert [day for _, day in releases] == sorted((day for _, day in releases), reverse=True)
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        bullets = re.findall(r"^- (.+(?:\n  .+)*)", section, re.M)
        repeated = {b.split("\n")[0] for b in bullets if bullets.count(b) > 1}
        assert repeated == set(), f"listed twice under {section.splitlines()[0]}: {repeated}"


class _Text(HTMLParser):
    """The text of an HTML fragment, as a browser shows it in a ``<pre>``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def html_text(fragment: str) -> str:
    parser = _Text()
    parser.feed(fragment)
    return "".join(parser.parts)


def signature_line_length() -> int:
    found = re.search(r"^\s+line_length:\s*(\d+)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert found, "mkdocs.yml sets no line_length for the signatures"
    return int(found.group(1))


def test_the_docs_extra_wraps_the_api_signatures(site: Path) -> None:
    """mkdocstrings wraps a signature only with a formatter installed (Ruff or Black): the
    ``docs`` extra brings one, and the built reference's signatures fit their line length, the
    long ones spread over several lines. (``docs/check_rendering.py`` checks the same and more
    in a browser.)"""
    docs_extra = re.search(r"^docs = \[\n(.*?)^\]", PYPROJECT.read_text("utf-8"), re.M | re.S)
    assert docs_extra and re.search(r'^\s+"(ruff|black)\b', docs_extra.group(1), re.M)
    limit = signature_line_length()
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    blocks = re.findall(r'<div class="doc-signature[^"]*"><pre>(.*?)</pre>', reference, re.S)
    signatures = [html_text(block).strip("\n") for block in blocks]
    assert len(signatures) >= 20
    too_long = [line for s in signatures for line in s.splitlines() if len(line) > limit]
    assert too_long == [], too_long
    (from_url,) = [s for s in signatures if s.startswith("from_url(")]
    assert len(from_url.splitlines()) > 5, from_url


def test_the_api_reference_has_one_title_and_a_short_table_of_contents(site: Path) -> None:
    """The page's title is words, not repeated as a code box below it, and its table of
    contents lists its groups and the classes and functions in them, not every method
    (``toc_depth: 3`` in mkdocs.yml; the members' methods are level 4)."""
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    titles, headings = (
        [" ".join(html_text(h).replace("¶", "").split()) for h in found]
        for found in (
            re.findall(rf"<h{level}[^>]*>(.*?)</h{level}>", reference, re.S) for level in (1, 3)
        )
    )
    assert titles == ["API reference"]
    names = [heading.split()[0] for heading in headings]
    assert "sa_redis_ids" not in names and {"RedisIds", "redis_id", "Redlock"} <= set(names)
    # the right-hand table of contents: the page's last "toc" component, before the content
    toc = reference.split('data-md-component="toc"')[-1].split('<div class="md-content"', 1)[0]
    entries = [
        " ".join(html_text(a).split())
        for a in re.findall(r'<a href="#[^"]*"[^>]*>(.*?)</a>', toc, re.S)
    ]
    assert {"The front end", "RedisIds", "redis_id"} <= set(entries), entries
    assert "from_url" not in entries and len(entries) <= 40, entries
