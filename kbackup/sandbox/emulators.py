"""Object-store emulators on loopback, each a real server in its own process, for the tests and the
benchmarks: moto's S3 server, fake-gcs-server (Cloud Storage's JSON API) and Azurite's blob service.

Each starts, waits until it listens, stops so that it saves what it holds first, and starts again on
the same port (a client's endpoint stays the same across an outage). ``make fake-gcs`` builds the
pinned fake-gcs-server and ``make azurite`` installs the pinned Azurite into the kafka-backup cache
folder; a missing one is a :class:`SandboxError` naming the make target, never a skipped test.
fake-gcs-server refuses a second upload with ``ifGenerationMatch=0`` itself, as Cloud Storage does
(test_storage_gcs.py shows it); gcp-storage-emulator from PyPI overwrote the object, so it cannot
prove the storage contract.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Self

from kbackup.core.cache import cache_root
from kbackup.sandbox.kafka import SandboxError, free_port

#: Any credentials work with moto; requests must be signed with some. The secret key is searched
#: for in the leak tests, so it is one no output would hold by chance.
S3_ACCESS_KEY = "kbackup-test-access"
S3_SECRET_KEY = "kbackup-test-secret-key-0123456789"  # noqa: S105 - moto takes any key
S3_REGION = "us-east-1"

FAKE_GCS_MODULE = "github.com/fsouza/fake-gcs-server"
FAKE_GCS_VERSION = "v1.56.1"
GCS_PROJECT = "kbackup-test-project"
#: The official Go tarball's place, for a shell whose PATH lacks it.
GO_TARBALL_BINARY = "/usr/local/go/bin/go"

AZURITE_VERSION = "3.37.0"
#: Azurite's development account and its published, well-known key (not a secret anywhere else).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


@dataclass(kw_only=True)
class EmulatorProcess(ABC):
    """One emulator process; :meth:`stop` and :meth:`start` make an outage on the same port."""

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

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> None:
        with self.output_path().open("ab") as output:
            self.process = subprocess.Popen(
                self.command(), stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SandboxError(f"{self.program} exited: {self.output_path().read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise SandboxError(f"{self.program} did not listen on {self.port} within {timeout}s")

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


@dataclass(kw_only=True)
class S3Server(EmulatorProcess):
    """A moto server process; its objects live in its memory, so a restart loses them."""

    log_path: Path
    program = "moto server"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]

    def output_path(self) -> Path:
        return self.log_path

    def client(self) -> Any:  # a boto3 S3 client (boto3 has no types here)
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=S3_REGION,
            aws_access_key_id=S3_ACCESS_KEY,
            aws_secret_access_key=S3_SECRET_KEY,
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def storage_settings(self, bucket: str, prefix: str = "") -> dict[str, str]:
        """The ``storage:`` section of a config file pointing at this server."""
        url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        return {
            "url": url,
            "endpoint_url": self.endpoint_url,
            "region": S3_REGION,
            "access_key_id": S3_ACCESS_KEY,
            "secret_access_key": S3_SECRET_KEY,
        }


def fake_gcs_binary() -> Path:
    """Where ``make fake-gcs`` puts the pinned fake-gcs-server."""
    return cache_root() / "fake-gcs-server" / FAKE_GCS_VERSION / "fake-gcs-server"


def install_fake_gcs() -> Path:
    """Build the pinned fake-gcs-server with ``go install`` unless it is already there."""
    target = fake_gcs_binary()
    if os.access(target, os.X_OK):
        return target
    go = shutil.which("go") or (GO_TARBALL_BINARY if os.access(GO_TARBALL_BINARY, os.X_OK) else None)
    if go is None:
        raise SystemExit(
            f"fake-gcs-server {FAKE_GCS_VERSION} needs Go to build "
            f"(`go install {FAKE_GCS_MODULE}@{FAKE_GCS_VERSION}`)"
        )
    # Built into a folder of its own, then moved: an interrupted build leaves no half binary.
    partial = target.parent.with_name(f"{FAKE_GCS_VERSION}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    print(f"building fake-gcs-server {FAKE_GCS_VERSION} into {target.parent} (go install, about a minute)")
    subprocess.run(
        [go, "install", f"{FAKE_GCS_MODULE}@{FAKE_GCS_VERSION}"],
        env={**os.environ, "GOBIN": str(partial)},
        check=True,
    )
    shutil.rmtree(target.parent, ignore_errors=True)
    partial.rename(target.parent)
    return target


@dataclass(kw_only=True)
class GcsServer(EmulatorProcess):
    """A fake-gcs-server process. Its objects live in its memory (a restart loses them), or, given
    ``data_folder``, in files there, kept across a stop and a start."""

    log_path: Path
    data_folder: Path | None = None
    program = "fake-gcs-server"

    def command(self) -> list[str]:
        binary = fake_gcs_binary()
        if not os.access(binary, os.X_OK):
            raise SandboxError(f"no fake-gcs-server at {binary}: `make fake-gcs` builds it")
        backend = (
            ["-backend", "filesystem", "-filesystem-root", str(self.data_folder)]
            if self.data_folder is not None
            else ["-backend", "memory"]
        )
        return [
            str(binary),
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(self.port),
            *backend,
            # Resumable uploads continue at the Location the server returns: this address.
            "-external-url",
            self.endpoint_url,
            "-public-host",
            f"127.0.0.1:{self.port}",
            "-log-level",
            "warn",
        ]

    def output_path(self) -> Path:
        return self.log_path

    def client(self) -> Any:  # a google.cloud.storage.Client (the library has no types)
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project=GCS_PROJECT,
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": self.endpoint_url},
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(name)

    def storage_settings(self, bucket: str, prefix: str = "") -> dict[str, Any]:
        """The ``storage:`` section of a config file pointing at this server."""
        url = f"gs://{bucket}/{prefix}" if prefix else f"gs://{bucket}"
        return {"url": url, "gcs": {"endpoint_url": self.endpoint_url, "anonymous": True}}


def azurite_blob_command() -> Path:
    """The installed ``azurite-blob``; a :class:`SandboxError` naming the make target when missing."""
    command = cache_root() / f"azurite-{AZURITE_VERSION}" / "node_modules" / ".bin" / "azurite-blob"
    if not command.exists():
        raise SandboxError(
            f"Azurite {AZURITE_VERSION} is not installed at {command}: `make azurite` installs it "
            "(npm install --prefix into the kafka-backup cache folder)"
        )
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
        return f"{self.endpoint_url}/{AZURITE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_ACCOUNT_KEY};"
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

    def create_bucket(self, name: str) -> None:
        """A container: Azure's bucket."""
        self.service().create_container(name)

    def storage_settings(self, container: str, prefix: str = "") -> dict[str, Any]:
        """The ``storage:`` section of a config file pointing at this emulator."""
        url = f"az://{container}/{prefix}" if prefix else f"az://{container}"
        return {
            "url": url,
            "azure": {
                "account_name": AZURITE_ACCOUNT,
                "endpoint": self.endpoint,
                "account_key": AZURITE_ACCOUNT_KEY,
            },
        }


if __name__ == "__main__":
    if sys.argv[1:] != ["install-fake-gcs"]:
        raise SystemExit("usage: python -m kbackup.sandbox.emulators install-fake-gcs")
    print(install_fake_gcs())
