"""A storage emulator run as its own process on a loopback port: started and waited for until it
listens, stopped, started again on the same port.

Each emulator (moto's S3 server, fake-gcs-server, Azurite) says only its command line, where its
output goes and how it is asked to stop.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from kbackup.sandbox.kafka import free_port


@dataclass(kw_only=True)
class EmulatorProcess(ABC):
    """One emulator process; :meth:`stop` and :meth:`start` make an outage on the same port, so a
    client's endpoint stays the same."""

    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    #: The program's name, in the errors of a start that failed.
    program: ClassVar[str]
    #: The signal that makes the program close its server and save what it holds.
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM
    #: What the program writes once it has stopped serving and saved what it holds, if it may
    #: linger after that (None: it exits).
    stopped_line: ClassVar[bytes | None] = None

    @abstractmethod
    def command(self) -> list[str]:
        """The program and its arguments."""

    @abstractmethod
    def output_path(self) -> Path:
        """The file its output (and the output of every restart) is appended to."""

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        with self.output_path().open("ab") as output:
            self.process = subprocess.Popen(
                self.command(), stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.program} exited: {self.output_path().read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.program} did not listen on {self.port} within {timeout}s")

    def stop(self) -> None:
        """Ask the program to stop, so it saves what it holds first; killed once it says it has
        stopped (``stopped_line``) but lingers, or after 10 s."""
        if self.process is not None and self.process.poll() is None:
            said_before = self.output_path().stat().st_size
            self.process.send_signal(self.stop_signal)
            deadline = time.monotonic() + 10
            while self.process.poll() is None and time.monotonic() < deadline:
                if self.stopped_line is not None and self.stopped_line in self._output_since(said_before):
                    break
                time.sleep(0.05)
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(10)
        self.process = None

    def _output_since(self, offset: int) -> bytes:
        with self.output_path().open("rb") as output:
            output.seek(offset)
            return output.read()
