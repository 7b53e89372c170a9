"""S3Storage's outer retry loop against an endpoint where nothing listens (no service needed).

The loop's clock is a virtual one (``time.monotonic`` advanced by ``time.sleep``), so the tests
assert what the loop does, its waits and its tries, never the wall clock of a shared machine.
"""

from __future__ import annotations

import pytest

from kbackup.core.config import StorageSettings
from kbackup.core.errors import StorageError
from kbackup.sandbox.kafka import free_port
from kbackup.storage import open_storage
from tests.support.virtual_clock import VirtualClock
from tests.support.virtual_clock import clock as clock  # the fixture


def unreachable(retry_timeout_secs: float, max_attempts: int = 1) -> StorageSettings:
    return StorageSettings.model_validate(
        {
            "url": "s3://bucket/prefix",
            "endpoint_url": f"http://127.0.0.1:{free_port()}",
            "region": "us-east-1",
            "access_key_id": "k",
            "secret_access_key": "s",
            "max_attempts": max_attempts,
            "retry_timeout_secs": retry_timeout_secs,
        }
    )


def test_a_refused_connection_is_retried_for_retry_timeout_secs_then_named(clock: VirtualClock) -> None:
    storage = open_storage(unreachable(retry_timeout_secs=2))
    with pytest.raises(StorageError) as caught:
        storage.get_bytes("b1/manifests/00000000.json")
    # Backoff 0.5 s then 1 s fits in 2 s; a next wait of 2 s would not: three tries, two waits.
    assert clock.sleeps == [0.5, 1.0]
    assert "s3://bucket/prefix/b1/manifests/00000000.json" in caught.value.message
    assert "still failing after 2s of retries" in caught.value.message
    assert "storage.retry_timeout_secs is 2" in caught.value.message
    assert caught.value.exit_code == 7


def test_the_backoff_doubles_up_to_its_cap(clock: VirtualClock) -> None:
    storage = open_storage(unreachable(retry_timeout_secs=60))
    with pytest.raises(StorageError, match="still failing after"):
        storage.size("b1/manifests/00000000.json")
    # 0.5, 1, 2, 4, 8, then the 10 s cap while the next try starts within 60 s (55.5 s waited).
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0, 10.0]


def test_max_attempts_is_a_quick_burst_that_a_short_retry_timeout_does_not_stretch(
    clock: VirtualClock,
) -> None:
    storage = open_storage(unreachable(retry_timeout_secs=5, max_attempts=8))
    with pytest.raises(StorageError, match="still failing after 6s"):
        storage.size("b1/manifests/00000000.json")
    # Eight tries 0.05 s doubling apart (6.35 s, as botocore's own retries waited); a next try after
    # 0.5 s more would start past the 5 s: the request gives up there, not after 8 tries of the
    # 0.5-10 s backoff (35.5 s).
    assert clock.sleeps == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2])


def test_after_the_burst_the_backoff_runs_while_retry_timeout_lasts(clock: VirtualClock) -> None:
    storage = open_storage(unreachable(retry_timeout_secs=60, max_attempts=3))
    with pytest.raises(StorageError, match="still failing after"):
        storage.size("b1/manifests/00000000.json")
    assert clock.sleeps == pytest.approx([0.05, 0.1, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0, 10.0])


def test_retry_timeout_zero_fails_on_the_first_error(clock: VirtualClock) -> None:
    storage = open_storage(unreachable(retry_timeout_secs=0))
    with pytest.raises(StorageError, match="still failing after 0s"):
        storage.size("b1/manifests/00000000.json")
    assert clock.sleeps == []


class Observer:
    """Records what S3Storage tells a RequestObserver."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, bool | None]] = []

    def storage_request_succeeded(self, operation: str) -> None:
        self.events.append(("succeeded", operation, None))

    def storage_request_failed(self, operation: str, *, transient: bool) -> None:
        self.events.append(("failed", operation, transient))

    def storage_request_retried(self, operation: str) -> None:
        self.events.append(("retried", operation, None))


def test_the_observer_hears_of_every_failed_try_and_every_retry(clock: VirtualClock) -> None:
    storage = open_storage(unreachable(retry_timeout_secs=2))
    observer = Observer()
    storage.observer = observer
    with pytest.raises(StorageError):
        storage.get_bytes("b1/manifests/00000000.json")
    # Three tries, each a transient failure; two of them were followed by another try.
    assert observer.events == [
        ("failed", "read", True),
        ("retried", "read", None),
        ("failed", "read", True),
        ("retried", "read", None),
        ("failed", "read", True),
    ]
