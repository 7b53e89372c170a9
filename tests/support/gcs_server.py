"""fake-gcs-server (github.com/fsouza/fake-gcs-server) as a real Cloud Storage JSON API on loopback,
in its own process.

``make fake-gcs`` (which ``make test`` runs) builds the pinned version with ``go install`` into the
kafka-backup cache (``python -m tests.support.gcs_server install``), once. It refuses a second
upload with ``ifGenerationMatch=0`` itself, as Cloud Storage does (test_storage_gcs.py shows it);
gcp-storage-emulator from PyPI overwrote the object, so it cannot prove the storage contract.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kbackup.core.cache import cache_root
from tests.support.emulator_process import EmulatorProcess

MODULE = "github.com/fsouza/fake-gcs-server"
VERSION = "v1.56.1"
PROJECT = "kbackup-test-project"
GO_TARBALL_BINARY = "/usr/local/go/bin/go"


def binary_path() -> Path:
    """Where ``make fake-gcs`` puts the pinned fake-gcs-server."""
    return cache_root() / "fake-gcs-server" / VERSION / "fake-gcs-server"


def install() -> Path:
    """Build the pinned fake-gcs-server with ``go install`` unless it is already there."""
    target = binary_path()
    if os.access(target, os.X_OK):
        return target
    # The official Go tarball's place, for a shell whose PATH lacks it.
    go = shutil.which("go") or (GO_TARBALL_BINARY if os.access(GO_TARBALL_BINARY, os.X_OK) else None)
    if go is None:
        raise SystemExit(f"fake-gcs-server {VERSION} needs Go to build (`go install {MODULE}@{VERSION}`)")
    # Built into a folder of its own, then moved: an interrupted build leaves no half binary.
    partial = target.parent.with_name(f"{VERSION}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    print(f"building fake-gcs-server {VERSION} into {target.parent} (go install, about a minute)")
    subprocess.run(
        [go, "install", f"{MODULE}@{VERSION}"], env={**os.environ, "GOBIN": str(partial)}, check=True
    )
    shutil.rmtree(target.parent, ignore_errors=True)
    partial.rename(target.parent)
    return target


def require_binary() -> Path:
    """The emulator to run; missing, the test fails (never skips) saying how to build it: the
    Makefile's test targets build it first, so a Cloud Storage test always runs there."""
    found = binary_path()
    if not os.access(found, os.X_OK):
        pytest.fail(f"no fake-gcs-server at {found}: `make fake-gcs` builds it")
    return found


@dataclass(kw_only=True)
class GcsServer(EmulatorProcess):
    """A fake-gcs-server process. Its objects live in its memory (a restart loses them), or, given
    ``data_folder``, in files there, kept across a stop and a start."""

    log_path: Path
    data_folder: Path | None = None
    program = "fake-gcs-server"

    def command(self) -> list[str]:
        backend = (
            ["-backend", "filesystem", "-filesystem-root", str(self.data_folder)]
            if self.data_folder is not None
            else ["-backend", "memory"]
        )
        return [
            str(require_binary()),
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
            project=PROJECT,
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": self.endpoint_url},
        )

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(name)

    def storage_settings(self, bucket: str, prefix: str = "") -> dict[str, Any]:
        """The ``storage:`` section of a config file pointing at this server."""
        url = f"gs://{bucket}/{prefix}" if prefix else f"gs://{bucket}"
        return {"url": url, "gcs": {"endpoint_url": self.endpoint_url, "anonymous": True}}


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        raise SystemExit("usage: python -m tests.support.gcs_server install")
    print(install())
