"""Azurite's blob service (the Azure Storage emulator, from npm) as a real HTTP endpoint on loopback.

``make azurite`` installs the pinned version into the cache folder (kbackup.core.cache); a test that
needs it fails when it is missing, saying so, instead of skipping.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kbackup.core.cache import cache_root
from kbackup.sandbox.kafka import free_port

AZURITE_VERSION = "3.37.0"
#: Azurite's development account and its published, well-known key (not a secret anywhere else).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
INSTALL_HINT = "`make azurite` installs it (npm install --prefix into the kafka-backup cache folder)"


def azurite_blob_command() -> Path:
    """The installed ``azurite-blob``; the test fails, naming the make target, when it is missing."""
    command = cache_root() / f"azurite-{AZURITE_VERSION}" / "node_modules" / ".bin" / "azurite-blob"
    if not command.exists():
        pytest.fail(f"Azurite {AZURITE_VERSION} is not installed at {command}: {INSTALL_HINT}")
    return command


@dataclass
class Azurite:
    """An azurite-blob process; :meth:`stop` and :meth:`start` simulate an outage (its folder stays)."""

    folder: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.endpoint};"
        )

    def start(self, timeout: float = 30.0) -> None:
        command = azurite_blob_command()
        log_path = self.folder / "azurite.log"
        log = log_path.open("ab")
        self.process = subprocess.Popen(
            [
                str(command),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--location",
                str(self.folder / "data"),
                "--skipApiVersionCheck",
                "--silent",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"azurite-blob exited: {log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"azurite-blob did not listen on {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            # Azurite closes its server on SIGINT (Ctrl-C); a SIGTERM leaves it running for a while.
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def service(self) -> Any:  # an azure.storage.blob.BlobServiceClient, straight from the SDK
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string)

    def storage_settings(self, container: str, prefix: str = "") -> dict[str, Any]:
        """The ``storage:`` section of a config file pointing at this emulator."""
        url = f"az://{container}/{prefix}" if prefix else f"az://{container}"
        return {
            "url": url,
            "azure": {"account_name": ACCOUNT, "endpoint": self.endpoint, "account_key": ACCOUNT_KEY},
        }
