"""moto's standalone S3 server as a real HTTP endpoint on loopback, in its own process."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.emulator_process import EmulatorProcess

ACCESS_KEY = "kbackup-test-access"
SECRET_KEY = "kbackup-test-secret-key-0123456789"  # a known secret, searched for in leak tests
REGION = "us-east-1"


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
