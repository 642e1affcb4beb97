"""Every Python example of the README and of the docs pages runs as written.

Sybil reads the pages (see ``tests/support/examples.py``): each ```` ```python ```` block runs in
order, in one namespace per page, on the embedded Redis and SQLite. A block marked
``<!-- skip: next "reason" -->`` is skipped with its reason; those stay few and say why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.examples import ROOT, page_id, pages, run_page, skip_directives

PAGES = pages()
MOST_SKIPS = 12
"""Blocks the whole documentation may skip: the examples are meant to run."""


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_the_pages_python_examples_run(page: Path) -> None:
    outcome = run_page(page)
    text = page.read_text(encoding="utf-8")
    blocks = text.count("```python\n")
    assert outcome.ran + len(outcome.skipped) == blocks, (
        f"{page_id(page)}: {blocks} Python blocks, {outcome.ran} ran, "
        f"{len(outcome.skipped)} skipped: a block was neither run nor skipped"
    )


def test_the_readme_has_examples_that_run() -> None:
    outcome = run_page(ROOT / "README.md")
    assert outcome.ran >= 2
    assert not outcome.skipped


def test_every_skip_says_why_and_skips_are_few() -> None:
    found = [(page, action, reason) for page in PAGES for action, reason in skip_directives(page)]
    for page, action, reason in found:
        assert action == "next", f"{page_id(page)}: use 'skip: next \"reason\"', not {action!r}"
        assert reason.startswith('"') and len(reason) > 10, (
            f"{page_id(page)}: a skip needs a quoted reason, got {reason!r}"
        )
    assert len(found) <= MOST_SKIPS, [f"{page_id(page)}: {reason}" for page, _, reason in found]
