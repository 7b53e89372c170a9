"""S3Storage's outer retry loop against an endpoint where nothing listens (no service needed)."""

from __future__ import annotations

import time

import pytest

from kbackup.core.config import StorageSettings
from kbackup.core.errors import StorageError
from kbackup.sandbox.kafka import free_port
from kbackup.storage import open_storage


def unreachable(retry_timeout_secs: float) -> StorageSettings:
    return StorageSettings.model_validate(
        {
            "url": "s3://bucket/prefix",
            "endpoint_url": f"http://127.0.0.1:{free_port()}",
            "region": "us-east-1",
            "access_key_id": "k",
            "secret_access_key": "s",
            "max_attempts": 1,  # botocore tries once: the timing below is the outer loop's
            "retry_timeout_secs": retry_timeout_secs,
        }
    )


def test_a_refused_connection_is_retried_for_retry_timeout_secs_then_named() -> None:
    storage = open_storage(unreachable(retry_timeout_secs=2))
    started = time.monotonic()
    with pytest.raises(StorageError) as caught:
        storage.get_bytes("b1/manifests/00000000.json")
    elapsed = time.monotonic() - started
    # Backoff 0.5 s then 1 s fits in 2 s; the next 2 s would not: about 1.5 s of waiting.
    assert 1.4 <= elapsed < 10, elapsed
    assert "s3://bucket/prefix/b1/manifests/00000000.json" in caught.value.message
    assert "still failing after" in caught.value.message
    assert "storage.retry_timeout_secs is 2" in caught.value.message
    assert caught.value.exit_code == 7


def test_retry_timeout_zero_fails_on_the_first_error() -> None:
    storage = open_storage(unreachable(retry_timeout_secs=0))
    started = time.monotonic()
    with pytest.raises(StorageError, match="still failing after 0s"):
        storage.size("b1/manifests/00000000.json")
    assert time.monotonic() - started < 5
