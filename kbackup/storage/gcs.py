"""A Google Cloud Storage bucket prefix as object storage (Google Cloud, fake-gcs-server).

Imported only for a ``gs://`` URL: a folder or S3 user never loads the Google client.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import requests
from google.api_core import exceptions as google_errors
from google.auth import exceptions as auth_errors
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import storage as gcs
from google.resumable_media import common as media_errors

from kbackup.core.config import GcsStorageSettings, StorageSettings
from kbackup.core.errors import StorageError
from kbackup.core.logs import get_logger
from kbackup.storage.base import ObjectInfo, check_key
from kbackup.storage.remote import RemoteStorage, causes, unresolvable

log = get_logger("storage.gcs")
T = TypeVar("T")

#: Uploads above this size go as a resumable upload in chunks of this size, so memory stays bounded
#: whatever the segment size (a multiple of 256 KiB, as the resumable protocol asks).
UPLOAD_CHUNK_BYTES = 32 * 1024 * 1024
#: Objects a listing asks for per page (the JSON API's most).
LIST_PAGE_SIZE = 1000
#: The Google client's own variable naming an emulator: that endpoint, and no credentials.
EMULATOR_HOST_VARIABLE = "STORAGE_EMULATOR_HOST"
#: Failures that can go away by themselves: the store asks to slow down or is briefly down, a
#: connection is refused, reset or times out, a download arrives damaged.
_TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    google_errors.TooManyRequests,
    google_errors.InternalServerError,
    google_errors.BadGateway,
    google_errors.ServiceUnavailable,
    google_errors.GatewayTimeout,
    google_errors.RequestRangeNotSatisfiable,
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
    auth_errors.TransportError,
    media_errors.DataCorruption,
    ConnectionError,
    TimeoutError,
)
#: What the Google client raises for a failed request (anything else is a bug, left to surface).
_REQUEST_ERRORS: tuple[type[BaseException], ...] = (
    google_errors.GoogleAPIError,
    requests.exceptions.RequestException,
    auth_errors.GoogleAuthError,
    media_errors.InvalidResponse,
    media_errors.DataCorruption,
    OSError,
    ValueError,
)


class GcsStorage(RemoteStorage):
    retry_log = log

    def __init__(
        self,
        bucket: str,
        prefix: str,
        settings: StorageSettings,
        *,
        check_timeout_secs: float | None = None,
    ) -> None:
        self.bucket_name = bucket
        self.prefix = prefix.strip("/")
        self.url = f"gs://{bucket}/{self.prefix}" if self.prefix else f"gs://{bucket}"
        gcs_settings = settings.gcs or GcsStorageSettings()
        emulator = os.environ.get(EMULATOR_HOST_VARIABLE)
        self.endpoint = gcs_settings.endpoint_url or emulator or "https://storage.googleapis.com"
        self._take_patience(settings, check_timeout_secs)
        #: (connect, read) seconds of every request; ``check`` answers in seconds.
        self._timeout: tuple[float, float] = (
            (check_timeout_secs, check_timeout_secs) if check_timeout_secs is not None else (10.0, 60.0)
        )
        credentials = _credentials(gcs_settings, anonymous=gcs_settings.anonymous or bool(emulator))
        options = {"api_endpoint": gcs_settings.endpoint_url} if gcs_settings.endpoint_url else None
        try:
            # Without a credentials file, the client finds Application Default Credentials here:
            # none at all fails now, before any request is retried.
            self._client = gcs.Client(
                project=gcs_settings.project, credentials=credentials, client_options=options
            )
        except auth_errors.DefaultCredentialsError:
            named = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
            found = (
                f"GOOGLE_APPLICATION_CREDENTIALS names {named}, which is not a usable credentials file"
                if named
                else "Application Default Credentials found none"
            )
            raise StorageError(
                f"no Google Cloud credentials to open {self.url}: storage.gcs.credentials_file is not "
                f"set and {found}",
                hint="set storage.gcs.credentials_file to a service account's JSON key, export "
                "GOOGLE_APPLICATION_CREDENTIALS, or run `gcloud auth application-default login`",
            ) from None
        # google-cloud-storage 3.x fetches the bucket's metadata (for tracing) in a thread of its own
        # before a request, retried by the client itself and fetched again while it fails: more
        # requests on every try, retried past storage.max_attempts. No metadata cache, no fetch.
        self._client._bucket_metadata_cache = None
        self._bucket = self._client.bucket(bucket)
        #: CMEK: every object written is encrypted with this Cloud KMS key (the upload's kmsKeyName).
        self.kms_key_name = gcs_settings.kms_key_name
        #: The class of the segments only; see :meth:`_new_blob`.
        self.data_storage_class = gcs_settings.storage_class

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _blob(self, key: str) -> gcs.Blob:
        """An object to read, look up or delete."""
        return self._bucket.blob(self._key(key), chunk_size=UPLOAD_CHUNK_BYTES)

    def _new_blob(self, key: str, *, data: bool = False) -> gcs.Blob:
        """An object to write: with the CMEK key, and for a segment (``data``: put_file, move_file,
        the only writes of record data) the configured storage class. Manifests, leases, keyrings
        and group snapshots keep the bucket's default class: they are small, read by every list,
        status and restore, and rewritten, and the colder classes bill a minimum of 30 to 365 days
        and each read."""
        blob = self._bucket.blob(
            self._key(key), chunk_size=UPLOAD_CHUNK_BYTES, kms_key_name=self.kms_key_name
        )
        if data and self.data_storage_class is not None:
            blob.storage_class = self.data_storage_class  # sent in the upload's object metadata
        return blob

    def _error(self, exc: BaseException, action: str, key: str | None = None) -> StorageError:
        """One StorageError naming the object and what to do; retryable only if waiting can fix it."""
        where = f"{self.url}/{key}" if key else self.url
        if isinstance(exc, google_errors.NotFound):
            if _names_missing_bucket(exc):
                return StorageError(
                    f"bucket {self.bucket_name} does not exist ({action} {where})",
                    hint="create the bucket or fix storage.url",
                )
            return StorageError(f"object {key} not found in {self.url}")
        if isinstance(exc, google_errors.Unauthorized | auth_errors.RefreshError):
            return StorageError(
                f"the Google Cloud credentials were rejected while trying to {action} {where}",
                hint="check storage.gcs.credentials_file (or the Application Default Credentials in use)",
            )
        if isinstance(exc, google_errors.Forbidden):
            return StorageError(
                f"access to {where} denied while trying to {action}",
                hint="check the service account's roles on the bucket (storage.objectAdmin)",
            )
        if isinstance(exc, requests.exceptions.ConnectionError) and unresolvable(exc):
            return StorageError(
                f"the host of {self.endpoint} does not resolve ({action} {where})",
                hint="check storage.gcs.endpoint_url (or STORAGE_EMULATOR_HOST)",
            )
        if isinstance(exc, _TRANSIENT_ERRORS):
            return StorageError(
                f"{action} {where} failed: {_reason(exc)} (endpoint {self.endpoint})",
                hint="check storage.gcs.endpoint_url and that Cloud Storage is reachable",
                retryable=True,
            )
        return StorageError(
            f"{action} {where} failed: {_reason(exc)} (endpoint {self.endpoint})",
            hint="check storage.gcs.endpoint_url and the bucket name",
        )

    def _failure(self, exc: Exception, action: str, key: str | None) -> tuple[StorageError, bool] | None:
        if not isinstance(exc, _REQUEST_ERRORS):
            return None
        # "No such object" is an answer; "no such bucket" is not.
        answered = isinstance(exc, google_errors.NotFound) and not _names_missing_bucket(exc)
        return self._error(exc, action, key), answered

    def put_bytes(self, key: str, data: bytes) -> None:
        self._call(
            "write",
            key,
            lambda: self._new_blob(key).upload_from_string(data, retry=None, timeout=self._timeout),
        )

    def put_file(self, key: str, path: Path) -> None:
        # Above 8 MiB the client sends a resumable upload, streamed from the file chunk by chunk.
        self._call(
            "upload",
            key,
            lambda: self._new_blob(key, data=True).upload_from_filename(
                str(path), retry=None, timeout=self._timeout
            ),
        )

    def put_bytes_if_absent(self, key: str, data: bytes) -> bool:
        def put_once() -> bool:
            try:
                # ifGenerationMatch=0: the store refuses the write if any version of the object exists.
                self._new_blob(key).upload_from_string(
                    data, if_generation_match=0, retry=None, timeout=self._timeout
                )
            except google_errors.PreconditionFailed:
                # The object exists. It is ours if an earlier try of ours was stored but its
                # answer was lost; only different bytes mean another writer got there first.
                return self._read(key) == data
            return True

        return self._call("write", key, put_once)

    def _pages(self, action: str, key: str | None, **request: Any) -> Iterator[tuple[Any, list[Any]]]:
        """list_blobs page by page, as (the page, its blobs), each page one request retried on its
        own (a listing can be long): a failed page is asked for again with the token of the page
        before it."""
        token: str | None = None
        while True:

            def next_page(token: str | None = token) -> tuple[tuple[Any, list[Any]], str | None]:
                blobs = self._client.list_blobs(
                    self._bucket,
                    page_token=token,
                    page_size=LIST_PAGE_SIZE,
                    retry=None,
                    timeout=self._timeout,
                    **request,
                )
                page = next(blobs.pages)
                items = list(page)  # read the page now, inside the try
                return (page, items), blobs.next_page_token

            (page, items), token = self._call(action, key, next_page)
            yield page, items
            if not token:
                return

    def list_prefixes(self, prefix: str = "") -> list[str]:
        if prefix:
            check_key(prefix.rstrip("/"))
        full_prefix = f"{self.prefix}/{prefix}" if self.prefix else prefix
        names: list[str] = []
        for page, _ in self._pages("list", prefix or None, prefix=full_prefix, delimiter="/"):
            names.extend(common[len(full_prefix) :].rstrip("/") for common in page.prefixes)
        return sorted(names)

    def _fetch(self, fetch: Callable[[], T]) -> T:
        """Run a download. Its 404 says 'No such object' even when the bucket is missing (the
        metadata requests name the bucket), so on that error path the bucket is looked up to tell
        the two apart."""
        try:
            return fetch()
        except google_errors.NotFound as exc:
            if _names_missing_bucket(exc) or self._bucket.exists(retry=None, timeout=self._timeout):
                raise
            raise google_errors.NotFound("The specified bucket does not exist.") from None  # type: ignore[no-untyped-call]

    def _read(self, key: str) -> bytes:
        data: bytes = self._fetch(
            lambda: self._blob(key).download_as_bytes(retry=None, timeout=self._timeout)
        )
        return data

    def get_bytes(self, key: str) -> bytes:
        return self._call("read", key, lambda: self._read(key))

    def download(self, key: str, path: Path) -> None:
        self._call(
            "download",
            key,
            lambda: self._fetch(
                lambda: self._blob(key).download_to_filename(str(path), retry=None, timeout=self._timeout)
            ),
        )

    def size(self, key: str) -> int | None:
        def look_up() -> int | None:
            blob = self._blob(key)
            try:
                blob.reload(retry=None, timeout=self._timeout)
            except google_errors.NotFound as exc:
                if _names_missing_bucket(exc):
                    raise
                return None
            return int(blob.size or 0)

        return self._call("look up", key, look_up)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        full_prefix = f"{self.prefix}/{prefix}" if self.prefix else prefix
        strip = len(self.prefix) + 1 if self.prefix else 0
        for _, items in self._pages("list", prefix or None, prefix=full_prefix):
            for blob in items:
                updated = blob.updated
                yield ObjectInfo(
                    blob.name[strip:], int(blob.size or 0), updated.timestamp() if updated else None
                )

    def delete(self, key: str) -> None:
        def delete_once() -> None:
            try:
                self._blob(key).delete(retry=None, timeout=self._timeout)
            except google_errors.NotFound as exc:
                if _names_missing_bucket(exc):
                    raise

        self._call("delete", key, delete_once)

    parallel_reads = 16
    # delete_many removes one object per request (delete_batch_size 1): the JSON API's batch
    # endpoint would send 100 in one, but fake-gcs-server does not serve it, so it could not be
    # proved here, and a batch's answers would need classifying one by one.


def _credentials(settings: GcsStorageSettings, *, anonymous: bool) -> Credentials | None:
    """The credentials the settings name; None: the client's Application Default Credentials."""
    if settings.credentials_file is not None:
        return _service_account(settings.credentials_file)
    if anonymous:
        return AnonymousCredentials()  # type: ignore[no-untyped-call]  # google-auth: unannotated
    return None


def _service_account(path: str) -> Credentials:
    """A service account's credentials from its JSON key file; a file that is missing, unreadable
    or not such a key fails at once, naming the file and never echoing what it holds."""
    from google.oauth2 import service_account

    where = f"storage.gcs.credentials_file {path}"
    hint = "name a service account's JSON key file (IAM > Service accounts > Keys > Add key > JSON)"
    try:
        info = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StorageError(f"{where} does not exist", hint=hint) from None
    except OSError as exc:
        raise StorageError(f"{where} cannot be read: {exc.strerror}", hint=hint) from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise StorageError(f"{where} is not JSON", hint=hint) from None
    if not isinstance(info, dict) or info.get("type") != "service_account":
        raise StorageError(
            f"{where} is not a service account key (its 'type' is not service_account)", hint=hint
        )
    try:
        credentials: Credentials = service_account.Credentials.from_service_account_info(  # type: ignore[no-untyped-call]
            info, scopes=["https://www.googleapis.com/auth/devstorage.read_write"]
        )
    except (ValueError, KeyError, auth_errors.GoogleAuthError):
        # Not the exception's words: they can quote the key.
        raise StorageError(
            f"{where} is not a usable service account key (a field is missing or the private key "
            "does not parse)",
            hint=hint,
        ) from None
    return credentials


def _names_missing_bucket(exc: google_errors.NotFound) -> bool:
    """A 404 about the bucket, not the object: the JSON API says 'The specified bucket does not exist'."""
    return "bucket" in str(exc.message).lower() and "object" not in str(exc.message).lower()


def _reason(exc: BaseException) -> str:
    """A short reason for a failed request: the API's status and message, or the connection's."""
    if isinstance(exc, google_errors.GoogleAPICallError):
        return f"{exc.code} {exc.message}".strip()
    for cause in causes(exc):
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
    return f"{type(exc).__name__}: {exc}"
