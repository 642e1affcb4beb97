"""The README's Python examples of the sections below run as written (on the embedded Redis)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
SECTIONS = [
    "### When Redis forgets",
    "## Replicas, Sentinel and eviction",
    "### Buffering (`block=`)",
]


def blocks(section: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index(section + "\n")
    level = section.split(" ")[0]
    end = min(
        (text.find(f"\n{'#' * n} ", start + len(section)) for n in range(1, len(level) + 1)),
        key=lambda found: found if found >= 0 else len(text),
    )
    body = text[start : end if end >= 0 else len(text)]
    return re.findall(r"```python\n(.*?)```", body, flags=re.S)


@pytest.mark.parametrize("section", SECTIONS)
def test_the_sections_python_examples_run(section: str) -> None:
    found = blocks(section)
    assert found, f"no Python example in {section!r}"
    for code in found:
        exec(compile(code, f"README.md {section}", "exec"), {})
