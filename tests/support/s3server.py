"""moto's standalone S3 server as a real HTTP endpoint on loopback, in its own process."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbackup.sandbox.kafka import free_port

ACCESS_KEY = "kbackup-test-access"
SECRET_KEY = "kbackup-test-secret-key-0123456789"  # a known secret, searched for in leak tests
REGION = "us-east-1"


@dataclass
class S3Server:
    """A moto server process; :meth:`stop` and :meth:`start` simulate an outage (state is lost)."""

    log_path: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto server exited: {self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"moto server did not listen on {self.port} within {timeout}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None

    def client(self) -> Any:  # a boto3 S3 client (boto3 has no types here)
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )

    def storage_settings(self, bucket: str, prefix: str = "") -> dict[str, str]:
        """The ``storage:`` section of a config file pointing at this server."""
        url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        return {
            "url": url,
            "endpoint_url": self.endpoint_url,
            "region": REGION,
            "access_key_id": ACCESS_KEY,
            "secret_access_key": SECRET_KEY,
        }
