"""Saturate the CPU while a fault test runs, so a guarantee that only holds on an idle machine fails.

`cpu_load` starts busy processes (one per core by default) for the duration of a ``with``
block and stops them by their process ids when it ends; nothing else is touched. A process that
spins competes with the load's workers and with the ``redis-server`` processes for every core, so
calls are delayed, threads are descheduled between a fetch and its use, and heals race the way they
do on a busy production host.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

SPIN = "while True:\n    pass\n"


@contextmanager
def cpu_load(processes: int | None = None) -> Iterator[int]:
    """Run ``processes`` (default: the number of cores) spinning Python processes for the block;
    yields how many were started."""
    count = processes if processes is not None else os.cpu_count() or 1
    spinners = [
        subprocess.Popen([sys.executable, "-c", SPIN], stdin=subprocess.DEVNULL)
        for _ in range(count)
    ]
    try:
        yield count
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()
