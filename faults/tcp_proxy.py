"""A TCP fault proxy in front of the API server: the operator's kubeconfig points here, so
the scenario can cut the operator off while the rest of the cluster (and the scenario's
own client) keeps working — a network partition between one replica and the API server.

Modes: "up" (bytes forwarded both ways, TLS untouched), "cut" (every open connection is
reset and new ones are reset on accept: what a client sees when a load balancer or the
API server behind it goes away).
"""

import contextlib
import socket
import struct
import threading
from typing import Literal

Mode = Literal["up", "cut"]
CHUNK = 65536


def _reset(conn: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), not FIN: the peer sees "connection reset". shutdown()
    first: close() alone does not end a recv() another thread is blocked in, and the
    connection would go on working."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        conn.close()


class TcpFaultProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self.mode: Mode = "up"
        self.connections = 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._listener = socket.create_server((host, 0))
        self.port: int = self._listener.getsockname()[1]
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def set_mode(self, mode: Mode) -> None:
        with self._lock:
            self.mode = mode
            doomed = list(self._open) if mode == "cut" else []
            self._open.difference_update(doomed)
        for conn in doomed:
            _reset(conn)

    def stop(self) -> None:
        self._stopped.set()
        self.set_mode("cut")
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            with self._lock:  # a cut made while connecting must not miss this one
                cut = self.mode == "cut"
                if not cut:
                    self._open.update((client, upstream))
            if cut:
                _reset(client)
                _reset(upstream)
                continue
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(CHUNK):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            with self._lock:
                gone = [s for s in (source, sink) if s in self._open]
                self._open.difference_update(gone)
            for conn in gone:
                _reset(conn)
