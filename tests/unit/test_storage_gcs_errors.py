# mypy: disable-error-code="no-untyped-call"
# (google-api-core's exception constructors are unannotated)
"""How GcsStorage classifies the Google client's failures (no emulator, no request): what waiting can
fix is retried by core/retry for ``storage.max_attempts`` tries, what it cannot fails at once."""

from __future__ import annotations

import pytest
import requests
from google.api_core import exceptions as google_errors
from google.auth import exceptions as auth_errors

from kbackup.core.config import StorageSettings
from kbackup.core.errors import StorageError
from kbackup.storage.gcs import GcsStorage


@pytest.fixture
def storage(monkeypatch: pytest.MonkeyPatch) -> GcsStorage:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    settings = StorageSettings.model_validate(
        {
            "url": "gs://kbackup-backups/prod",
            "gcs": {"endpoint_url": "http://127.0.0.1:9", "anonymous": True},
            "max_attempts": 3,
            "retry_timeout_secs": 0,
        }
    )
    return GcsStorage("kbackup-backups", "prod", settings)


@pytest.mark.parametrize(
    ("failure", "words", "retryable"),
    [
        (google_errors.TooManyRequests("rate limit"), "429 rate limit", True),
        (google_errors.ServiceUnavailable("backend down"), "503 backend down", True),
        (google_errors.InternalServerError("oops"), "500 oops", True),
        (requests.exceptions.ConnectionError("refused"), "refused", True),
        (
            google_errors.NotFound("The specified bucket does not exist."),
            "bucket kbackup-backups does not exist",
            False,
        ),
        (google_errors.NotFound("No such object: kbackup-backups/prod/k"), "object k not found", False),
        (
            google_errors.Forbidden("no storage.objects.create"),
            "access to gs://kbackup-backups/prod/k denied",
            False,
        ),
        (google_errors.Unauthorized("invalid token"), "credentials were rejected", False),
        (auth_errors.RefreshError("invalid_grant"), "credentials were rejected", False),
        (google_errors.BadRequest("invalid argument"), "400 invalid argument", False),
    ],
)
def test_failures_are_classified(
    storage: GcsStorage, failure: Exception, words: str, retryable: bool
) -> None:
    error = storage._error(failure, "write", "k")
    assert words in error.message
    assert error.retryable is retryable
    assert "\n" not in error.message


class Counting:
    def __init__(self) -> None:
        self.retried = 0
        self.failed: list[bool] = []

    def storage_request_succeeded(self, operation: str) -> None:
        pass

    def storage_request_failed(self, operation: str, *, transient: bool) -> None:
        self.failed.append(transient)

    def storage_request_retried(self, operation: str) -> None:
        self.retried += 1


def test_throttling_is_tried_max_attempts_times_then_given_up(storage: GcsStorage) -> None:
    tries = 0

    def throttled() -> None:
        nonlocal tries
        tries += 1
        raise google_errors.TooManyRequests("slow down")

    observer = Counting()
    storage.observer = observer
    with pytest.raises(StorageError, match="still failing after") as caught:
        storage._call("write", "k", throttled)
    assert caught.value.retryable
    assert tries == 3
    assert observer.retried == 2
    assert observer.failed == [True, True, True]


def test_a_missing_bucket_is_tried_once(storage: GcsStorage) -> None:
    tries = 0

    def missing() -> None:
        nonlocal tries
        tries += 1
        raise google_errors.NotFound("The specified bucket does not exist.")

    with pytest.raises(StorageError, match="bucket kbackup-backups does not exist"):
        storage._call("read", "k", missing)
    assert tries == 1
