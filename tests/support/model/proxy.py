"""A TCP forwarder on a free loopback port: the address the model's processes know Redis by.

A promotion points it at another server (``switch``), as a virtual IP or a DNS name moved by an
operator would: connections open at the time are closed, new ones reach the new server, and the
processes keep their ``RedisIds`` and everything they remember.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.support.servers import HOST


class Proxy:
    def __init__(self, backend_port: int):
        self.backend_port = backend_port
        self._listener = socket.create_server((HOST, 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection((HOST, self.backend_port), timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    server.close()
                    return
                self._open.update((client, server))
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for each in (source, sink):
            self._drop(each)

    def _drop(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()

    def cut(self) -> None:
        """Close every connection open now (the processes reconnect)."""
        with self._lock:
            sockets = list(self._open)
        for sock in sockets:
            self._drop(sock)

    def switch(self, backend_port: int) -> None:
        """Send new connections to ``backend_port`` and close the open ones."""
        self.backend_port = backend_port
        self.cut()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._listener.close()
        self.cut()
