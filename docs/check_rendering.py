"""Check the documentation as a reader's browser shows it, in headless Chromium.

Builds the site with this interpreter's MkDocs (the ``docs`` extra; warnings are the strict build's
business, in the test suite) into a temporary folder, serves it on 127.0.0.1 and opens pages at a 1280-pixel wide window. On
each page it checks, measuring the laid-out page rather than the Markdown:

* no code block clips its lines: no ``<pre>``/``<code>`` is wider inside than its box
  (``scrollWidth > clientWidth``), so nothing hides behind a scroll bar;
* the copy button of a code block covers none of its text;
* every API signature is wrapped: no line longer than the signatures' line length, and a long
  signature spread over several lines (this needs a formatter, Ruff or Black, which the ``docs``
  extra installs);
* the page has one title, not repeated as the heading below it, and its table of contents lists
  at most ``MAX_TOC_ENTRIES`` entries.

It also saves a screenshot of each page (and of the API reference at ``RedisIds.from_url``) to
look at. Run it from the repository after changing the docs' theme, styles or mkdocstrings
options::

    pip install -e '.[docs]'
    python docs/check_rendering.py --screenshots /tmp/docs-shots

It needs a Chromium (Debian: ``apt-get install chromium``; found on the ``PATH`` as
``chromium``, ``chromium-browser``, ``google-chrome`` or given with ``--chromium``). Exit status
0 when every check holds, 1 with a line per problem, 2 when no Chromium or the build failed.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 1280
HEIGHT = 1000
SHOT_HEIGHT = 2400
"""Screenshots are taller than the window the checks measure in, to show more of each page."""
MAX_TOC_ENTRIES = 40
"""A right-hand table of contents longer than this is a list to scroll, not a map of the page."""

PAGES = {
    "home": "",
    "quickstart": "quickstart/",
    "choosing": "choosing/",
    "reference": "reference/",
    "reference-asyncio": "reference/asyncio/",
    "changelog": "changelog/",
}
"""The pages checked, by a short name (used for the screenshots' file names)."""

SCREENSHOT_ANCHORS = {
    "reference-from_url": "reference/?scroll=sa_redis_ids.RedisIds.from_url"
}
"""Extra screenshots scrolled to an anchor: a long signature of the API reference."""

CHROMIUM_NAMES = (
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
)
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=10000",
]
"""Headless, and nothing fetched from the network but the pages served here."""

MARKER = "sa-redis-ids-render-check"
MEASURE = """
<script>
window.addEventListener("load", () => setTimeout(() => {
  const found = {pres: 0, signatures: 0, overflow: [], covered: [], unwrapped: [],
                 titles: [], toc: 0, repeated_title: false};
  const lineLength = %(line_length)d;
  const text = (el) => (el.innerText || "").replace(/\\n+$/, "");
  const longest = (el) => text(el).split("\\n").reduce((a, b) => (b.length > a.length ? b : a), "");
  for (const pre of document.querySelectorAll("article pre")) {
    found.pres += 1;
    for (const box of [pre, pre.querySelector(":scope > code")]) {
      if (box && box.scrollWidth > box.clientWidth + 1) {
        found.overflow.push(`${box.scrollWidth} > ${box.clientWidth} px: ${longest(box).trim()}`);
        break;
      }
    }
    const code = pre.querySelector(":scope > code");
    for (const button of pre.querySelectorAll(".md-code__button, .md-clipboard")) {
      if (!code || getComputedStyle(button).display === "none") continue;
      const b = button.getBoundingClientRect();
      const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
      outer: for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        if (!node.textContent.trim()) continue;
        const range = document.createRange();
        range.selectNodeContents(node);
        for (const r of range.getClientRects()) {
          if (r.right > b.left && r.left < b.right && r.bottom > b.top && r.top < b.bottom) {
            found.covered.push(node.textContent.trim().slice(0, 60));
            break outer;
          }
        }
      }
    }
  }
  for (const sig of document.querySelectorAll("article .doc-signature")) {
    found.signatures += 1;
    const line = longest(sig);
    if (line.length > lineLength) found.unwrapped.push(line.trim().slice(0, 120));
  }
  found.titles = [...document.querySelectorAll("article h1")].map((h) => h.textContent.trim());
  const next = document.querySelector("article h1 ~ h2, article h1 ~ div h2");
  const title = (found.titles[0] || "").replace(/\\u00b6/g, "").trim();
  found.repeated_title = !!next && next.textContent.replace(/\\u00b6/g, "").trim() === title;
  found.toc = document.querySelectorAll(
    ".md-sidebar--secondary .md-nav--secondary a.md-nav__link").length;
  const out = document.createElement("pre");
  out.id = "%(marker)s";
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
}, 300));
</script>
"""
"""Injected before ``</body>`` of a page requested with ``?check``: measures it once laid out
(after the theme's script added its copy buttons) and writes the findings into the page."""


SCROLL = """
<script>
window.addEventListener("load", () => {
  const target = document.getElementById(%(target)s);
  const block = target.closest(".doc-object") || target.parentElement;
  document.querySelector("article").prepend(block);
});
</script>
"""
"""Injected into a page requested with ``?scroll=ID``: the object documented at the anchor ``ID``
is moved to the top of the page, where a screenshot shows it (a headless screenshot of a
scrolled page comes out blank)."""


@dataclass
class Findings:
    """What the measuring script found on one page."""

    page: str
    pres: int
    signatures: int
    overflow: list[str]
    covered: list[str]
    unwrapped: list[str]
    titles: list[str]
    repeated_title: bool
    toc: int

    def problems(self) -> list[str]:
        problems = [
            f"{self.page}: clipped code line ({line})" for line in self.overflow
        ]
        problems += [
            f"{self.page}: copy button covers {text!r}" for text in self.covered
        ]
        problems += [
            f"{self.page}: signature not wrapped: {line}" for line in self.unwrapped
        ]
        if len(self.titles) != 1:
            problems.append(f"{self.page}: {len(self.titles)} titles: {self.titles}")
        if self.repeated_title:
            problems.append(
                f"{self.page}: the title is repeated by the heading below it"
            )
        if self.toc > MAX_TOC_ENTRIES:
            problems.append(f"{self.page}: {self.toc} table-of-contents entries")
        return problems


def signature_line_length() -> int:
    """The ``line_length`` mkdocstrings wraps signatures at (mkdocs.yml; 60 is its default)."""
    found = re.search(
        r"^\s+line_length:\s*(\d+)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M
    )
    return int(found.group(1)) if found else 60


def find_chromium(given: str | None) -> str | None:
    if given:
        return given if shutil.which(given) else None
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


def build_site(out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [
        sys.executable,
        "-m",
        "mkdocs",
        "build",
        "--no-strict",
        "--site-dir",
        str(out),
    ]
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the built site; an HTML page asked for with ``?check`` gets the measuring script."""

    script = ""

    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if query == "check":
            script = self.script
        elif query.startswith("scroll="):  # a screenshot of the page at an anchor
            target = json.dumps(query.removeprefix("scroll="))
            script = SCROLL % {"target": target}
        else:
            super().do_GET()
            return
        file = Path(self.translate_path(path))
        if file.is_dir():
            file = file / "index.html"
        body = file.read_text(encoding="utf-8").replace(
            "</body>", script + "</body>", 1
        )
        data = body.encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serving(site: Path) -> Iterator[str]:
    """The site served on a free loopback port for the block: yields its base URL."""
    _Handler.script = MEASURE % {
        "line_length": signature_line_length(),
        "marker": MARKER,
    }
    handler = functools.partial(_Handler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def chromium(
    binary: str, profile: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def measure(binary: str, profile: Path, base: str, name: str, path: str) -> Findings:
    result = chromium(
        binary,
        profile,
        f"--window-size={WIDTH},{HEIGHT}",
        "--dump-dom",
        f"{base}{path}?check",
    )
    found = re.search(rf'<pre id="{MARKER}">(.*?)</pre>', result.stdout, re.S)
    if not found:
        raise RuntimeError(f"{name}: the page reported nothing: {result.stderr[-500:]}")
    raw = (
        found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
    )
    return Findings(page=name, **json.loads(raw.replace("&amp;", "&")))


def screenshot(binary: str, profile: Path, url: str, file: Path) -> None:
    chromium(
        binary,
        profile,
        f"--window-size={WIDTH},{SHOT_HEIGHT}",
        f"--screenshot={file}",
        url,
    )
    if not file.is_file():
        raise RuntimeError(f"no screenshot of {url}")


def check(
    binary: str, site: Path, shots: Path | None
) -> tuple[list[Findings], list[str]]:
    findings: list[Findings] = []
    with tempfile.TemporaryDirectory() as profile, serving(site) as base:
        for name, path in PAGES.items():
            findings.append(measure(binary, Path(profile), base, name, path))
            if shots:
                screenshot(binary, Path(profile), base + path, shots / f"{name}.png")
        if shots:
            for name, path in SCREENSHOT_ANCHORS.items():
                screenshot(binary, Path(profile), base + path, shots / f"{name}.png")
    problems = [problem for found in findings for problem in found.problems()]
    by_name = {found.page: found for found in findings}
    if by_name["reference"].signatures < 20:
        problems.append(
            "reference: fewer than 20 signatures measured: the check saw no API"
        )
    if sum(found.pres for found in findings) < 20:
        problems.append("fewer than 20 code blocks measured: the check saw no code")
    return findings, problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--chromium", help="the Chromium to run (default: found on the PATH)"
    )
    parser.add_argument("--screenshots", type=Path, help="save a PNG of each page here")
    parser.add_argument(
        "--site", type=Path, help="check this built site instead of building"
    )
    args = parser.parse_args(argv)
    binary = find_chromium(args.chromium)
    if binary is None:
        print(
            "no Chromium found: install one (Debian: apt-get install chromium)",
            file=sys.stderr,
        )
        return 2
    if args.screenshots:
        args.screenshots.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        site = args.site
        if site is None:
            site = Path(work) / "site"
            built = build_site(site)
            if built.returncode != 0:
                print(built.stdout + built.stderr, file=sys.stderr)
                return 2
        findings, problems = check(binary, site, args.screenshots)
    for found in findings:
        print(
            f"{found.page:18} {found.pres:3} code blocks, {found.signatures:3} signatures, "
            f"{found.toc:3} contents entries"
        )
    for problem in problems:
        print(problem)
    print("ok" if not problems else f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
