"""Cloud Storage and Azure Blob Storage tried no more than ``storage.max_attempts`` times against
an endpoint that throttles or resets every connection: each try is one request, so neither SDK
retries on its own (or sends requests of its own meanwhile) and attempts never multiply.

The endpoint is tests.support.faulty_proxy in ``busy`` mode (each backend's own throttling answer:
Cloud Storage 429 and 503 in turn, Azure 503 ServerBusy) or ``reset`` mode; it needs no server
behind it, so these run without an emulator.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kbackup.core.config import StorageSettings
from kbackup.core.errors import StorageError
from kbackup.sandbox.emulators import AZURITE_ACCOUNT, AZURITE_ACCOUNT_KEY
from kbackup.storage import Storage, open_storage
from tests.support.faulty_proxy import AZURE_SERVER_BUSY, GCS_THROTTLED, FaultyProxy, Mode

MAX_ATTEMPTS = 2
#: Time for a request sent by an SDK thread of its own to reach the proxy and be counted.
SETTLE_SECS = 0.1


def gcs_section(endpoint: str) -> dict[str, Any]:
    return {"url": "gs://kbackup-test/p", "gcs": {"endpoint_url": endpoint, "anonymous": True}}


def azure_section(endpoint: str) -> dict[str, Any]:
    account = {
        "account_name": AZURITE_ACCOUNT,
        "endpoint": f"{endpoint}/{AZURITE_ACCOUNT}",
        "account_key": AZURITE_ACCOUNT_KEY,
    }
    return {"url": "az://kbackup-test/p", "azure": account}


#: Each backend's throttling answers and its ``storage:`` section for an endpoint.
BACKENDS: dict[str, tuple[tuple[bytes, ...], Callable[[str], dict[str, Any]]]] = {
    "gcs": (GCS_THROTTLED, gcs_section),
    "azure": (AZURE_SERVER_BUSY, azure_section),
}
OPERATIONS: dict[str, Callable[[Storage, Path], object]] = {
    "put_bytes": lambda storage, _: storage.put_bytes("k", b"x" * 100),
    "put_file": lambda storage, tmp: storage.put_file("k", _small_file(tmp)),
    "put_bytes_if_absent": lambda storage, _: storage.put_bytes_if_absent("k", b"x"),
    "get_bytes": lambda storage, _: storage.get_bytes("k"),
    "download": lambda storage, tmp: storage.download("k", tmp / "downloaded"),
    "size": lambda storage, _: storage.size("k"),
    "list": lambda storage, _: list(storage.list("")),
    "list_prefixes": lambda storage, _: storage.list_prefixes(""),
    "delete": lambda storage, _: storage.delete("k"),
    "delete_many": lambda storage, _: storage.delete_many(["a", "b"]),
}


def _small_file(folder: Path) -> Path:
    path = folder / "segment"
    path.write_bytes(b"y" * 1000)
    return path


class CountingObserver:
    """Counts kbackup's own tries of a request, as the run's observer is told of them."""

    def __init__(self) -> None:
        self.failed = 0

    def storage_request_succeeded(self, operation: str) -> None:
        pass

    def storage_request_failed(self, operation: str, *, transient: bool) -> None:
        self.failed += 1

    def storage_request_retried(self, operation: str) -> None:
        pass


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def proxy(backend: str) -> Iterator[FaultyProxy]:
    # Port 9 (discard): nothing is forwarded in the modes these tests use.
    proxy = FaultyProxy(upstream_port=9, busy_answers=BACKENDS[backend][0])
    yield proxy
    proxy.close()


@pytest.mark.parametrize("mode", ["busy", "reset"])
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_each_try_is_one_request_and_the_last_failure_is_one_retryable_line(
    backend: str,
    proxy: FaultyProxy,
    mode: Mode,
    operation: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    section = BACKENDS[backend][1](proxy.endpoint_url)
    storage = open_storage(
        StorageSettings.model_validate({**section, "max_attempts": MAX_ATTEMPTS, "retry_timeout_secs": 0})
    )
    observer = CountingObserver()
    storage.observer = observer
    proxy.set_mode(mode)
    with pytest.raises(StorageError) as raised:
        OPERATIONS[operation](storage, tmp_path)
    time.sleep(SETTLE_SECS)
    assert observer.failed == MAX_ATTEMPTS
    # A try may meet a pooled connection the proxy already closed, and never reach it: never more.
    assert 1 <= proxy.faults_served <= MAX_ATTEMPTS, (
        f"{proxy.faults_served} requests for {MAX_ATTEMPTS} tries"
    )
    error = raised.value
    assert error.retryable
    assert "\n" not in error.message
    assert "storage.retry_timeout_secs is 0" in error.message
    if mode == "busy":
        assert (
            ("429" in error.message or "503" in error.message)
            if backend == "gcs"
            else "ServerBusy" in error.message
        )
