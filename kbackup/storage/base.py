"""The object storage interface every stage reads and writes backups through.

Keys are relative, ``/``-separated paths below the storage's root (a folder,
or a bucket prefix). A key can never leave that root: ``..``, absolute paths,
backslashes and empty segments are refused before any I/O.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kbackup.core.errors import StorageError
from kbackup.storage.keys import KeyEncryptionKey

_KEY_SEGMENT = re.compile(r"^[A-Za-z0-9._=+@,-]+$")


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    #: When the object was stored (Unix time), where the store says: prune's grace period for
    #: objects no manifest lists yet.
    modified: float | None = None


def check_key(key: str) -> str:
    """Return ``key`` if it is a safe relative object key, else raise ``StorageError``."""
    if not key or key.startswith("/") or "\\" in key or "\0" in key:
        raise StorageError(f"object key {key!r} is not a relative path below the storage root")
    for segment in key.split("/"):
        if segment in ("", ".", "..") or not _KEY_SEGMENT.match(segment):
            raise StorageError(
                f"object key {key!r} has an unsafe segment {segment!r}: keys stay below the storage root "
                "and use letters, digits and . _ = + @ , -"
            )
    return key


class RequestObserver(Protocol):
    """Told how each request to the store went (metrics, readiness); called from any thread."""

    def storage_request_succeeded(self, operation: str) -> None: ...

    def storage_request_failed(self, operation: str, *, transient: bool) -> None: ...

    def storage_request_retried(self, operation: str) -> None: ...


class Storage(ABC):
    """Write-once object storage: a local folder, an S3 or a Google Cloud Storage bucket prefix.

    A remote backend (S3 and GCS today, Azure next) sends each request through
    ``kbackup.core.retry.call_with_retries``, as ``S3Storage._call`` does: its client library
    tries once (no retries of its own underneath), each failure becomes a ``StorageError``
    whose ``retryable`` says whether waiting may help, and the observer hears of every try.
    """

    #: A description safe to print (no credentials).
    url: str
    #: ``storage.encryption``: the key that opens encrypted backups here (None: none configured).
    key_encryption_key: KeyEncryptionKey | None = None
    #: Told about each request to a remote store (a local folder reports nothing: its errors
    #: are never retried, they end the run).
    observer: RequestObserver | None = None

    @abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``; readers see all of it or nothing."""

    @abstractmethod
    def put_file(self, key: str, path: Path) -> None:
        """Upload a local file under ``key``; readers see all of it or nothing."""

    def move_file(self, key: str, path: Path) -> None:
        """Store a local file the caller no longer needs under ``key``; the file is gone afterwards.

        Like :meth:`put_file`, but a backend may move the file into place instead of copying
        it (a folder on the same filesystem does: a segment is then written once, not twice).
        """
        try:
            self.put_file(key, path)
        finally:
            path.unlink(missing_ok=True)

    @abstractmethod
    def put_bytes_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if no object has that key; False (nothing written) if one does.

        Manifests are written this way, so two runs can never overwrite each other's.
        """

    @abstractmethod
    def list_prefixes(self, prefix: str = "") -> list[str]:
        """The names of the immediate 'folders' below ``prefix`` (which is empty or ends with '/')."""

    @abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """The whole object; ``StorageError`` naming the key if it is missing."""

    @abstractmethod
    def download(self, key: str, path: Path) -> None:
        """Copy the object into a local file."""

    @abstractmethod
    def size(self, key: str) -> int | None:
        """The object's size in bytes, or None if it does not exist."""

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, in key order."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove an object; no error if it is already gone."""

    #: Keys one delete_many request removes at most (S3's DeleteObjects takes 1,000).
    delete_batch_size = 1
    #: Small objects (manifests) worth reading at the same time: a remote store answers each
    #: after a round trip; a local folder answers at once.
    parallel_reads = 1

    def delete_many(self, keys: Sequence[str], before_each_request: Callable[[], None] | None = None) -> int:
        """Remove ``keys`` (already gone: no error), in as few requests as the store allows;
        ``before_each_request`` is called before each request. Returns the requests made."""
        requests = 0
        for start in range(0, len(keys), self.delete_batch_size):
            if before_each_request is not None:
                before_each_request()
            self._delete_batch(keys[start : start + self.delete_batch_size])
            requests += 1
        return requests

    def _delete_batch(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.delete(key)

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    def location_exists(self) -> bool:
        """Whether the location itself is there: a folder that is not holds no backups, and is most
        often a mistyped path. An S3 prefix has no existence of its own (a missing bucket fails the
        first request)."""
        return True

    def check_writable(self) -> None:
        """Write and remove a probe object, so a run fails before it copies anything."""
        probe = ".kafka-backup-write-probe"
        self.put_bytes(probe, b"probe")
        self.delete(probe)
