"""Fork a child that makes a call while a thread of the parent is held inside the library."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable


def child_call_status(call: Callable[[], object], release: threading.Event) -> int:
    """Fork; the child runs ``call()`` (SIGALRM ends it after 20 s, as a hang would never end);
    the parent waits a second, so the child calls while the parent's thread is still held, then
    sets ``release``. Returns the child's exit code (0: the call returned)."""
    pid = os.fork()
    if pid == 0:
        signal.alarm(20)
        try:
            call()
        except BaseException:
            os._exit(1)
        os._exit(0)
    time.sleep(1.0)
    release.set()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)
