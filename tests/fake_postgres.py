"""Loopback TCP servers that behave like broken or hostile PostgreSQL servers.

``FakePostgres("silent")`` accepts connections and never answers a byte: the store that hangs.
``FakePostgres("password")`` speaks just enough of the wire protocol to ask for a clear-text
password and reject it with a FATAL error whose text echoes the password it received, the worst
a driver error can do, so tests can prove that no message ever passes a password on.
"""

from __future__ import annotations

import socket
import struct
import threading

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104
_CANCEL_REQUEST = 80877102


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("client went away")
        data += chunk
    return data


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!I", len(body) + 4) + body


class FakePostgres:
    """A server on ``127.0.0.1:<free port>``; use as a context manager.

    :param mode: ``silent`` (never answers) or ``password`` (rejects the password, echoing it).
    """

    def __init__(self, mode: str) -> None:
        if mode not in ("silent", "password"):
            raise ValueError(mode)
        self.mode = mode
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)  # lets the accept loop see the stop flag
        self.port = self._server.getsockname()[1]
        self._clients: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> FakePostgres:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._thread.join(5)
        self._server.close()
        with self._lock:
            for client in self._clients:
                client.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            with self._lock:
                self._clients.append(conn)
            if self.mode == "password":
                threading.Thread(target=self._reject_password, args=(conn,), daemon=True).start()

    def _reject_password(self, conn: socket.socket) -> None:
        try:
            while True:
                (length,) = struct.unpack("!I", _read_exactly(conn, 4))
                body = _read_exactly(conn, length - 4)
                (code,) = struct.unpack("!I", body[:4])
                if code in (_SSL_REQUEST, _GSSENC_REQUEST):
                    conn.sendall(b"N")
                    continue
                if code == _CANCEL_REQUEST:
                    return
                break
            conn.sendall(_message(b"R", struct.pack("!I", 3)))  # AuthenticationCleartextPassword
            kind = _read_exactly(conn, 1)
            (length,) = struct.unpack("!I", _read_exactly(conn, 4))
            password = _read_exactly(conn, length - 4).rstrip(b"\0")
            if kind != b"p":
                return
            fields = (
                b"SFATAL\0VFATAL\0C28P01\0M"
                + b"password authentication failed (got '" + password + b"')\0\0"
            )
            conn.sendall(_message(b"E", fields))
        except (OSError, ConnectionError, struct.error):
            return
        finally:
            conn.close()
