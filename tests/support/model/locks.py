"""Who holds a lock on the model's SQLite file, from ``/proc/locks`` (Linux).

SQLite takes POSIX advisory locks on byte ranges of the database file: a reader holds a SHARED
(READ) lock while a statement reads, a writer RESERVED and then PENDING (WRITE) while it commits,
and waits up to its busy timeout (60 s here) for readers to finish. A process that keeps a read
open after its work blocks every commit of the others: what the model checks after each step.
"""

from __future__ import annotations

from pathlib import Path


def database_locks(db_path: str | Path) -> list[tuple[int, str]]:
    """``(pid, "READ"/"WRITE")`` of each lock held on ``db_path`` now (empty where there is no
    ``/proc/locks``)."""
    try:
        inode = Path(db_path).stat().st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        # "1: POSIX  ADVISORY  READ 1234 fe:00:5678 1073741826 1073742335"
        if len(fields) > 5 and fields[1] == "POSIX" and fields[5].rsplit(":", 1)[-1] == str(inode):
            found.append((int(fields[4]), fields[3]))
    return found
