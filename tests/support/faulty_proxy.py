"""A TCP proxy in front of an object store's endpoint that can fail on command, for storage fault tests.

moto's server loses every object when it is stopped, so an outage is made
here instead, between the client and a server that keeps its state:

- ``forward``: bytes pass through both ways (the normal case);
- ``reset``: every connection is accepted and reset at once, as when the endpoint is down
  or a load balancer drops connections (botocore sees a connection error);
- ``busy``: every request is answered as the store answers when it throttles and the
  connection closed: ``busy_answers`` in turn, S3's ``503 SlowDown`` unless told otherwise
  (Cloud Storage: :data:`GCS_THROTTLED`, Azure: :data:`AZURE_SERVER_BUSY`);
- ``lose-answer`` (once): the next connection's request reaches the server, its answer is
  dropped and the connection cut; then the proxy forwards again. The client cannot tell
  whether the request was applied.

Switching away from ``forward`` also cuts the connections already open, so a
client's pooled keep-alive connections meet the outage too.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["forward", "reset", "busy", "lose-answer"]


def http_answer(status: bytes, content_type: bytes, body: bytes, *headers: bytes) -> bytes:
    """A whole HTTP/1.1 answer that closes its connection."""
    head = [b"HTTP/1.1 " + status, b"Content-Type: " + content_type, b"Content-Length: %d" % len(body)]
    return b"\r\n".join([*head, *headers, b"Connection: close", b"", body])


SLOW_DOWN_RESPONSE = http_answer(
    b"503 Slow Down",
    b"application/xml",
    b'<?xml version="1.0" encoding="UTF-8"?>\n'
    b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>",
)


def _gcs_error(status: bytes, code: int, reason: bytes, message: bytes) -> bytes:
    """Cloud Storage's JSON API error, as it answers a request it will not serve now."""
    body = b'{"error": {"code": %d, "message": "%s", "errors": [{"reason": "%s", "message": "%s"}]}}' % (
        code,
        message,
        reason,
        message,
    )
    return http_answer(status, b"application/json; charset=UTF-8", body)


#: Cloud Storage throttling: the rate limit (429) and the service briefly unavailable (503), in turn.
GCS_THROTTLED = (
    _gcs_error(
        b"429 Too Many Requests", 429, b"rateLimitExceeded", b"The rate of change requests is too high."
    ),
    _gcs_error(b"503 Service Unavailable", 503, b"backendError", b"Backend Error"),
)
#: Azure Blob Storage throttling: 503 with the error code ServerBusy in a header and the body.
AZURE_SERVER_BUSY = (
    http_answer(
        b"503 The server is busy.",
        b"application/xml",
        b'<?xml version="1.0" encoding="utf-8"?><Error><Code>ServerBusy</Code>'
        b"<Message>The server is busy.</Message></Error>",
        b"x-ms-error-code: ServerBusy",
        b"x-ms-version: 2025-01-05",
    ),
)


@dataclass
class FaultyProxy:
    upstream_port: int
    mode: Mode = "forward"
    #: The answers of ``busy`` mode, one per request in turn.
    busy_answers: tuple[bytes, ...] = (SLOW_DOWN_RESPONSE,)
    #: Connections or requests that met a fault (a test checks the outage was really met).
    faults_served: int = 0
    _listener: socket.socket = field(init=False)
    _open: set[socket.socket] = field(default_factory=set, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="faulty-proxy", daemon=True).start()

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_mode(self, mode: Mode) -> None:
        with self._lock:
            self.mode = mode
            if mode != "forward":
                for sock in self._open:
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.set_mode("reset")
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                mode = self.mode
                if mode != "forward":
                    self.faults_served += 1
                if mode == "lose-answer":
                    self.mode = "forward"
            if mode == "reset":
                # SO_LINGER 0: close sends RST, the client sees "connection reset by peer".
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()
            elif mode == "busy":
                answer = self.busy_answers[self.faults_served % len(self.busy_answers)]
                threading.Thread(target=self._answer_busy, args=(client, answer), daemon=True).start()
            else:
                lose = mode == "lose-answer"
                threading.Thread(target=self._forward, args=(client, lose), daemon=True).start()

    @staticmethod
    def _answer_busy(client: socket.socket, answer: bytes) -> None:
        """Read the request, its body too, and answer it. A body left unread would make the close
        send a reset, which the client might meet before it reads the answer."""
        with client:
            client.settimeout(10)
            received = b""
            with contextlib.suppress(OSError):
                while b"\r\n\r\n" not in received:
                    chunk = client.recv(65536)
                    if not chunk:
                        return
                    received += chunk
                head, _, body = received.partition(b"\r\n\r\n")
                wanted = _awaited_body_bytes(head)
                while len(body) < wanted:
                    chunk = client.recv(65536)
                    if not chunk:
                        return
                    body += chunk
                client.sendall(answer)

    def _forward(self, client: socket.socket, lose_answer: bool = False) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._open.update((client, upstream))
        answer = self._drop if lose_answer else self._pump
        pump = threading.Thread(target=answer, args=(upstream, client), daemon=True)
        pump.start()
        self._pump(client, upstream)
        pump.join()
        with self._lock:
            self._open.difference_update((client, upstream))
        client.close()
        upstream.close()

    @staticmethod
    def _drop(upstream: socket.socket, client: socket.socket) -> None:
        """Wait for the server's final answer, throw it away and cut both connections.

        A ``100 Continue`` is passed on, so the client sends its body and the server
        applies the request (botocore sends S3 uploads with ``Expect: 100-continue``).
        """
        with contextlib.suppress(OSError):
            while chunk := upstream.recv(65536):
                if not chunk.startswith(b"HTTP/1.1 100"):
                    break
                interim, _, rest = chunk.partition(b"\r\n\r\n")
                if rest:
                    break  # the final answer came in the same read
                client.sendall(interim + b"\r\n\r\n")
        for sock in (client, upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        # One side ended: end the other too, so both pumps finish.
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _awaited_body_bytes(head: bytes) -> int:
    """The bytes of body the client sends before it waits for an answer: its Content-Length, or
    none when it asks ``Expect: 100-continue`` first (as botocore does for uploads)."""
    length = 0
    for line in head.lower().split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip() == b"expect" and value.strip() == b"100-continue":
            return 0
        if name.strip() == b"content-length":
            length = int(value.strip())
    return length
