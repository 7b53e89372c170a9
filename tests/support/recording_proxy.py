"""A TCP proxy that forwards to an emulator and keeps what the client sent, to show what a client
library put on the wire when the emulator itself drops it (fake-gcs-server forgets an upload's
``kmsKeyName``; Azurite takes ``x-ms-encryption-scope`` and keeps nothing of it).

Nothing is mocked: the requests reach the emulator and its answers come back unchanged.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from dataclasses import dataclass, field

from tests.support.faulty_proxy import FaultyProxy

#: A request line and its headers (a body that happened to hold one would be read as one too; the
#: bodies here are Parquet files and JSON manifests).
_REQUEST_HEAD = re.compile(rb"(GET|PUT|POST|PATCH|DELETE|HEAD) (\S+) HTTP/1\.1\r\n(.*?)\r\n\r\n", re.DOTALL)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    #: The path and query as sent (``/upload/storage/v1/b/B/o?uploadType=multipart&kmsKeyName=...``).
    target: str
    #: Header names in lower case.
    headers: dict[str, str]


@dataclass
class RecordingProxy(FaultyProxy):
    """A :class:`FaultyProxy` left forwarding, keeping what each client connection sent."""

    _sent: list[bytearray] = field(default_factory=list, init=False)

    def requests(self) -> list[RecordedRequest]:
        """Every request the clients sent so far, connection by connection."""
        with self._lock:
            streams = [bytes(sent) for sent in self._sent]
        found = []
        for stream in streams:
            for match in _REQUEST_HEAD.finditer(stream):
                lines = match.group(3).decode("latin-1").split("\r\n")
                headers = {
                    name.strip().lower(): value.strip()
                    for name, _, value in (h.partition(":") for h in lines)
                }
                found.append(RecordedRequest(match.group(1).decode(), match.group(2).decode(), headers))
        return found

    def _forward(self, client: socket.socket, lose_answer: bool = False) -> None:
        # Always forwarding (the mode stays "forward"): lose_answer is never set.
        sent = bytearray()
        with self._lock:
            self._sent.append(sent)
        with client, socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10) as upstream:
            upstream.settimeout(None)
            answers = threading.Thread(target=self._pump, args=(upstream, client), daemon=True)
            answers.start()
            with contextlib.suppress(OSError):
                while chunk := client.recv(65536):
                    with self._lock:
                        sent += chunk
                    upstream.sendall(chunk)
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            answers.join()
