"""The repository as a clone gets it: no tracked symlink points outside the checkout (it would
dangle, or worse, reach into whatever the path names on the cloning machine)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tracked_symlinks() -> list[str]:
    """Paths that git tracks as symlinks (mode 120000)."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no tracked files to check")
    listing = subprocess.run(
        [git, "ls-files", "-s", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    return [
        entry.partition("\t")[2] for entry in listing.split("\0") if entry.startswith("120000 ")
    ]


def _target(path: str) -> str:
    """The link text git stores for ``path`` (what a clone's symlink will hold)."""
    blob = subprocess.run(
        [shutil.which("git") or "git", "cat-file", "-p", f":{path}"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=60,
    )
    return blob.stdout.decode()


def _inside(path: str, target: str) -> bool:
    if os.path.isabs(target):
        return False
    resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
    return resolved != ".." and not resolved.startswith(("../", "/"))


@pytest.mark.parametrize(
    ("path", "target", "inside"),
    [
        ("a", "/work/main/.venv", False),
        ("a", "../outside", False),
        ("docs/a", "../../x", False),
        ("docs/a", "../README.md", True),
        ("docs/a", "changelog.md", True),
    ],
)
def test_the_check_tells_inside_from_outside(path: str, target: str, inside: bool) -> None:
    assert _inside(path, target) is inside


def test_no_tracked_symlink_points_outside_the_repository() -> None:
    outside = [
        f"{path} -> {target}"
        for path in _tracked_symlinks()
        if not _inside(path, target := _target(path))
    ]
    assert outside == []
