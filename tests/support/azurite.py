"""Azurite's blob service (the Azure Storage emulator, from npm) as a real HTTP endpoint on loopback.

``make azurite`` installs the pinned version into the cache folder (kbackup.core.cache); a test that
needs it fails when it is missing, saying so, instead of skipping.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kbackup.core.cache import cache_root
from tests.support.emulator_process import EmulatorProcess

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


@dataclass(kw_only=True)
class Azurite(EmulatorProcess):
    """An azurite-blob process keeping its blobs in ``folder``, so a stop and a start keep them.

    Its blob index is saved to the folder every 5 seconds and when it stops: :meth:`stop` keeps every
    blob it acknowledged; a SIGKILL would lose the last seconds' blobs, which no real store does."""

    folder: Path
    program = "azurite-blob"
    # Azurite closes its server and saves its index on SIGINT (Ctrl-C); a SIGTERM leaves it running.
    stop_signal = signal.SIGINT
    # Then it keeps running while a client holds a keep-alive connection open, its index saved.
    stopped_line = b"Azurite Blob service successfully closed"

    @property
    def endpoint(self) -> str:
        return f"{self.endpoint_url}/{ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.endpoint};"
        )

    def command(self) -> list[str]:
        return [
            str(azurite_blob_command()),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(self.port),
            "--location",
            str(self.folder / "data"),
            "--skipApiVersionCheck",
            "--silent",
        ]

    def output_path(self) -> Path:
        return self.folder / "azurite.log"

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
