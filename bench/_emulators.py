"""The object stores of the storage benchmark, each on loopback in its own process: moto's S3 server,
fake-gcs-server (Cloud Storage) and Azurite's blob service (Azure), with one bucket (container) made
in each, and the ``storage:`` section of a config that points at a prefix in it.

The benchmarks never import the tests, so the emulators are started here the way tests/support
starts them, at the same pinned versions: ``make fake-gcs`` builds fake-gcs-server and ``make
azurite`` installs Azurite into the kafka-backup cache folder (``make bench`` runs both).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbackup.core.cache import cache_root
from kbackup.sandbox.kafka import free_port

#: The bucket (container) each store holds the benchmark's backups in.
BUCKET = "kbackup-bench"
FAKE_GCS_VERSION = "v1.56.1"
AZURITE_VERSION = "3.37.0"
#: Any credentials work with moto; a storage section needs some to sign requests.
S3_ACCESS_KEY, S3_SECRET_KEY, S3_REGION = "bench-access", "bench-secret-key-0123456789", "us-east-1"
#: Azurite's development account and its published, well-known key (not a secret anywhere else).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#: A store's ``storage:`` section for a prefix in its bucket.
Section = Callable[[str], dict[str, Any]]


@dataclass
class Emulator:
    """One emulator process listening on ``port``; its output in ``log_path``."""

    name: str
    command: list[str]
    port: int
    log_path: Path
    #: Azurite closes its server on SIGINT (Ctrl-C); a SIGTERM leaves it running for a while.
    stop_signal: int = signal.SIGTERM
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def __enter__(self) -> Emulator:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                if time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError(f"{self.name} did not listen on {self.port} within 60 s") from None
                time.sleep(0.1)

    def __exit__(self, *_: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(self.stop_signal)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        self.process = None


def installed(path: Path, make_target: str) -> str:
    """An emulator's program; a missing one stops the benchmark naming the make target that installs it."""
    if not path.exists():
        raise SystemExit(f"no {path}: `make {make_target}` installs it")
    return str(path)


def moto_command(port: int) -> list[str]:
    """moto's standalone server (all its services, S3 among them) on a loopback port."""
    return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]


def _s3(work: Path, stack: ExitStack) -> Section:
    import boto3

    port = free_port()
    stack.enter_context(Emulator("moto server", moto_command(port), port, work / "moto.log"))
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=S3_REGION,
        aws_access_key_id=S3_ACCESS_KEY,
        aws_secret_access_key=S3_SECRET_KEY,
    ).create_bucket(Bucket=BUCKET)
    return lambda prefix: {
        "url": f"s3://{BUCKET}/{prefix}",
        "endpoint_url": endpoint,
        "region": S3_REGION,
        "access_key_id": S3_ACCESS_KEY,
        "secret_access_key": S3_SECRET_KEY,
    }


def _gcs(work: Path, stack: ExitStack) -> Section:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    program = installed(cache_root() / "fake-gcs-server" / FAKE_GCS_VERSION / "fake-gcs-server", "fake-gcs")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    (work / "fake-gcs").mkdir()
    stack.enter_context(
        Emulator(
            "fake-gcs-server",
            [
                program,
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                str(port),
                # Objects on disk, as Azurite keeps them: a benchmark's backups would fill memory.
                "-backend",
                "filesystem",
                "-filesystem-root",
                str(work / "fake-gcs"),
                # Resumable uploads continue at the Location the server returns: this address.
                "-external-url",
                endpoint,
                "-public-host",
                f"127.0.0.1:{port}",
                "-log-level",
                "warn",
            ],
            port,
            work / "fake-gcs.log",
        )
    )
    client = storage.Client(
        project="kbackup-bench",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": endpoint},
    )
    client.create_bucket(BUCKET)
    return lambda prefix: {
        "url": f"gs://{BUCKET}/{prefix}",
        "gcs": {"endpoint_url": endpoint, "anonymous": True},
    }


def _azure(work: Path, stack: ExitStack) -> Section:
    from azure.storage.blob import BlobServiceClient

    program = installed(
        cache_root() / f"azurite-{AZURITE_VERSION}" / "node_modules" / ".bin" / "azurite-blob", "azurite"
    )
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
    stack.enter_context(
        Emulator(
            "azurite-blob",
            [
                program,
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(port),
                "--location",
                str(work / "azurite"),
                "--skipApiVersionCheck",
                "--silent",
            ],
            port,
            work / "azurite.log",
            stop_signal=signal.SIGINT,
        )
    )
    BlobServiceClient.from_connection_string(
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={endpoint};"
    ).create_container(BUCKET)
    return lambda prefix: {
        "url": f"az://{BUCKET}/{prefix}",
        "azure": {"account_name": AZURITE_ACCOUNT, "endpoint": endpoint, "account_key": AZURITE_KEY},
    }


@contextmanager
def emulated_stores(work: Path) -> Iterator[dict[str, Section]]:
    """S3, Cloud Storage and Azure emulators running, a bucket in each: their sections by store name."""
    with ExitStack() as stack:
        yield {
            "S3 (moto server)": _s3(work, stack),
            "GCS (fake-gcs-server)": _gcs(work, stack),
            "Azure (Azurite)": _azure(work, stack),
        }
