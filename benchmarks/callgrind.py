"""The server's instructions per call, counted by callgrind: a cost that load does not move.

``INFO cpu`` and ``INFO commandstats`` on a shared machine change from run to run with what else
runs on its cores. Valgrind's callgrind counts the instructions a ``redis-server`` executes in user
space instead: the same count for the same server, script and arguments, whatever the machine is
doing. It leaves out the kernel's share of a call (reading and writing the socket), which is the
same for a script and for an ``INCR``.

`CallgrindServer` starts ``redis-server`` under ``valgrind --tool=callgrind`` (a free loopback
port, stopped by process id), and `CallgrindServer.instructions` returns the instructions one
call costs: the counters are zeroed, the call is made ``calls`` times, and the dump's total is
divided by ``calls``. Under valgrind the server runs about fifty times slower, so a few thousand
calls are plenty.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.servers import RedisServer

_TOTAL = re.compile(r"^(?:summary|totals):\s+(\d+)", re.MULTILINE)


def available() -> bool:
    """Whether valgrind and callgrind_control are on the PATH."""
    return bool(shutil.which("valgrind") and shutil.which("callgrind_control"))


class CallgrindServer:
    """A ``redis-server`` under callgrind; use as a context manager."""

    def __init__(self) -> None:
        self.dumps = Path(tempfile.mkdtemp(prefix="sa_redis_ids_callgrind_"))
        self.server = RedisServer(
            wrapper=[
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={self.dumps}/callgrind.out.%p",
            ],
            # One server tick a second (10 by default): the ticks between the zeroing and the
            # dump are counted too, and on a loaded machine the calls take longer, so more of
            # them would fall inside and add noise to the instructions per call.
            args=["--hz", "1"],
            start_seconds=60.0,
        )

    def __enter__(self) -> CallgrindServer:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
        shutil.rmtree(self.dumps, ignore_errors=True)

    @property
    def url(self) -> str:
        return self.server.url

    def _control(self, option: str) -> None:
        process = self.server.process
        if process is None:
            raise RuntimeError("the callgrind server is not running")
        subprocess.run(
            ["callgrind_control", option, str(process.pid)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def instructions(self, call: Callable[[], object], calls: int, *, warm: int = 50) -> float:
        """Instructions the server executes per ``call()``, over ``calls`` calls after ``warm``."""
        for _ in range(warm):
            call()
        self._control("-z")
        for _ in range(calls):
            call()
        before = set(self.dumps.iterdir())
        self._control("-d")
        deadline = time.monotonic() + 30
        while True:
            written = [path for path in self.dumps.iterdir() if path not in before]
            if written or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        time.sleep(0.2)  # the file appears before its last lines (the totals) are written
        total = 0
        for path in set(self.dumps.iterdir()) - before:
            found = _TOTAL.search(path.read_text(encoding="utf-8", errors="replace"))
            if found:
                total += int(found.group(1))
            path.unlink()
        if not total:
            raise RuntimeError("callgrind wrote no counts")
        return total / calls
