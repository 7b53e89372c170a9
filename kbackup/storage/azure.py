"""An Azure Blob Storage container prefix as object storage (Azure, sovereign clouds, Azurite)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    IncompleteReadError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobServiceClient, ContainerClient, StandardBlobTier

from kbackup.core.config import AzureLocation, StorageSettings, azure_location
from kbackup.core.errors import StorageError
from kbackup.core.logs import get_logger
from kbackup.core.secrets import register_secret
from kbackup.storage.base import ObjectInfo, check_key
from kbackup.storage.remote import RemoteStorage, os_reason, unresolvable

log = get_logger("storage.azure")
T = TypeVar("T")
#: One listing page: each blob's name, size and last-modified time.
_Page = list[tuple[str, int, float | None]]

# The SDK logs every request's URL and headers at INFO; kbackup's own lines say what failed.
logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(logging.WARNING)
logging.getLogger("azure.identity").setLevel(logging.WARNING)

#: Uploads above this size go in blocks of BLOCK_SIZE, so memory stays bounded whatever the segment size.
SINGLE_PUT_SIZE = 64 * 1024 * 1024
BLOCK_SIZE = 8 * 1024 * 1024
#: Blocks of one upload (or ranges of one download) in flight at once.
TRANSFER_CONCURRENCY = 4
#: Blobs one listing page asks for (Azure's own maximum is 5,000).
LIST_PAGE_SIZE = 5000

_NOT_FOUND_CODES = {"BlobNotFound", "ResourceNotFound"}
_CONTAINER_MISSING_CODES = {"ContainerNotFound", "ContainerBeingDeleted"}
#: Codes Azure sends when it asks the client to slow down or try again.
_TRANSIENT_CODES = {"ServerBusy", "OperationTimedOut", "InternalError"}
_CREDENTIALS_HINT = (
    "set storage.azure.account_key, storage.azure.sas_token or storage.azure.connection_string (write "
    "${ENV_VAR} for secrets), or give DefaultAzureCredential an identity (AZURE_CLIENT_ID with "
    "AZURE_CLIENT_SECRET or a workload identity, a managed identity, or `az login`)"
)


class AzureBlobStorage(RemoteStorage):
    retry_log = log

    def __init__(
        self, url: str, settings: StorageSettings, *, check_timeout_secs: float | None = None
    ) -> None:
        location = azure_location(url)
        self.container = location.container
        self.prefix = location.prefix
        self.url = f"az://{self.container}/{self.prefix}" if self.prefix else f"az://{self.container}"
        self._take_patience(settings, check_timeout_secs)
        service = _service_client(location, settings, check_timeout_secs)
        # Without the query: a SAS token's client puts the token there, and errors name the endpoint.
        self.endpoint = service.url.partition("?")[0].rstrip("/")
        self._container: ContainerClient = service.get_container_client(self.container)
        azure = settings.azure
        #: Sent with every blob written: the account's encryption scope (a customer-managed key).
        self._write_options: dict[str, Any] = {}
        if azure is not None and azure.encryption_scope is not None:
            self._write_options["encryption_scope"] = azure.encryption_scope
        #: Sent with the segments only (put_file, move_file: the only writes of record data). The
        #: manifests, leases, keyrings and group snapshots keep the account's default tier: they
        #: are small, read by every list, status and restore, and rewritten, and Cool and Cold bill
        #: a minimum of 30 or 90 days and each read.
        self._data_options = dict(self._write_options)
        if azure is not None and azure.access_tier is not None:
            self._data_options["standard_blob_tier"] = StandardBlobTier(azure.access_tier)

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _error(self, exc: AzureError, action: str, key: str | None = None) -> StorageError:
        """One StorageError naming the object and what to do; retryable only if waiting can fix it."""
        where = f"{self.url}/{key}" if key else self.url
        if isinstance(exc, ClientAuthenticationError) and exc.status_code is None:
            # azure-identity found no identity (or could not get a token for it): nothing to retry.
            return StorageError(
                f"no Azure credentials to {action} {where}: storage.azure sets no account_key, sas_token "
                "or connection_string, and DefaultAzureCredential found no identity",
                hint=_CREDENTIALS_HINT,
            )
        if isinstance(exc, IncompleteReadError):
            # A response cut short (a DecodeError, so an HttpResponseError, with the status of a success).
            return StorageError(
                f"{action} {where} failed: the response from {self.endpoint} was cut short",
                hint="check that the blob service is reachable",
                retryable=True,
            )
        if isinstance(exc, HttpResponseError) and exc.status_code is not None:
            return self._response_error(exc, action, where, key)
        if isinstance(exc, ServiceRequestError | ServiceResponseError):
            if unresolvable(exc):
                return StorageError(
                    f"the host of {self.endpoint} does not resolve ({action} {where})",
                    hint="check storage.azure.account_name or storage.azure.endpoint",
                )
            reason = os_reason(exc) or type(exc).__name__
            return StorageError(
                f"{action} {where} failed: cannot connect to {self.endpoint} ({reason})",
                hint="check storage.azure.endpoint and that the blob service is reachable",
                retryable=True,
            )
        return StorageError(
            f"{action} {where} failed: {type(exc).__name__} (endpoint {self.endpoint})",
            hint="check storage.azure and the container name",
        )

    def _response_error(
        self, exc: HttpResponseError, action: str, where: str, key: str | None
    ) -> StorageError:
        code = str(_error_code(exc) or exc.status_code)
        status = int(exc.status_code or 0)
        if code in _CONTAINER_MISSING_CODES:
            return StorageError(
                f"container {self.container} does not exist ({action} {where})",
                hint="create the container or fix storage.url",
            )
        if code in _NOT_FOUND_CODES or status == 404:
            return StorageError(f"object {key} not found in {self.url}")
        if code == "AuthenticationFailed":
            return StorageError(
                f"the Azure credentials were rejected ({code}) while trying to {action} {where}",
                hint="check storage.azure.account_key (or sas_token, connection_string) and account_name",
            )
        if status == 403:
            return StorageError(
                f"access to {where} denied ({code}) while trying to {action}",
                hint="check storage.azure's account_key, sas_token or connection_string, and the role of "
                "the identity or the SAS token's permissions (read, write, list, delete)",
            )
        return StorageError(
            f"{action} {where} failed: {code} (HTTP {status})",
            retryable=status >= 500 or status == 429 or code in _TRANSIENT_CODES,
        )

    def _failure(self, exc: Exception, action: str, key: str | None) -> tuple[StorageError, bool] | None:
        if not isinstance(exc, AzureError):
            return None
        # "No such blob" is an answer; "no such container" is not.
        answered = isinstance(exc, ResourceNotFoundError) and _error_code(exc) in _NOT_FOUND_CODES
        return self._error(exc, action, key), answered

    def put_bytes(self, key: str, data: bytes) -> None:
        self._call(
            "write",
            key,
            lambda: self._container.upload_blob(self._key(key), data, overwrite=True, **self._write_options),
        )

    def put_file(self, key: str, path: Path) -> None:
        def upload() -> None:
            # Streamed from the file: blocks of BLOCK_SIZE above SINGLE_PUT_SIZE, committed at the end,
            # so a reader sees the whole blob or none. Each try reads the file from its start.
            with path.open("rb") as stream:
                self._container.upload_blob(
                    self._key(key),
                    stream,
                    length=path.stat().st_size,
                    overwrite=True,
                    max_concurrency=TRANSFER_CONCURRENCY,
                    **self._data_options,
                )

        self._call("upload", key, upload)

    def put_bytes_if_absent(self, key: str, data: bytes) -> bool:
        def put_once() -> bool:
            try:
                # overwrite=False sends If-None-Match: *; the service refuses when the blob exists.
                self._container.upload_blob(self._key(key), data, overwrite=False, **self._write_options)
            except ResourceExistsError:
                # The blob exists. It is ours if an earlier try of ours was stored but its answer
                # was lost; only different bytes mean another writer got there first.
                return self._read(key) == data
            return True

        return self._call("write", key, put_once)

    def list_prefixes(self, prefix: str = "") -> list[str]:
        if prefix:
            check_key(prefix.rstrip("/"))
        full_prefix = f"{self.prefix}/{prefix}" if self.prefix else prefix

        def walk() -> list[str]:
            return [
                item.name[len(full_prefix) :].rstrip("/")
                for item in self._container.walk_blobs(name_starts_with=full_prefix or None, delimiter="/")
                if item.name.endswith("/")
            ]

        return sorted(self._call("list", prefix or None, walk))

    def _read(self, key: str) -> bytes:
        return self._container.download_blob(self._key(key)).readall()

    def get_bytes(self, key: str) -> bytes:
        return self._call("read", key, lambda: self._read(key))

    def download(self, key: str, path: Path) -> None:
        def fetch() -> None:
            with path.open("wb") as target:
                self._container.download_blob(self._key(key), max_concurrency=TRANSFER_CONCURRENCY).readinto(
                    target
                )

        self._call("download", key, fetch)

    def size(self, key: str) -> int | None:
        def head() -> int | None:
            try:
                properties = self._container.get_blob_client(self._key(key)).get_blob_properties()
            except ResourceNotFoundError as exc:
                if _error_code(exc) in _CONTAINER_MISSING_CODES:
                    raise
                return None
            return int(properties.size)

        return self._call("look up", key, head)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        full_prefix = f"{self.prefix}/{prefix}" if self.prefix else prefix
        strip = len(self.prefix) + 1 if self.prefix else 0
        for page in self._pages(full_prefix, prefix or None):
            for name, size, modified in page:
                yield ObjectInfo(name[strip:], size, modified)

    #: Blobs per listing page; the tests make it small to cross page boundaries.
    list_page_size = LIST_PAGE_SIZE

    def _pages(self, full_prefix: str, key: str | None) -> Iterator[_Page]:
        """The listing page by page, each page a request retried on its own (a listing can be long):
        a retry starts again at the continuation token of the last page yielded."""
        token: str | None = None
        while True:

            def next_page(token: str | None = token) -> tuple[_Page, str | None]:
                pages: Any = self._container.list_blobs(
                    name_starts_with=full_prefix or None, results_per_page=self.list_page_size
                ).by_page(continuation_token=token)
                blobs = [
                    (blob.name, int(blob.size), _timestamp(blob.last_modified)) for blob in next(pages, [])
                ]
                return blobs, pages.continuation_token

            blobs, token = self._call("list", key, next_page)
            yield blobs
            if not token:
                return

    def delete(self, key: str) -> None:
        def delete_once() -> None:
            try:
                self._container.delete_blob(self._key(key))
            except ResourceNotFoundError as exc:
                if _error_code(exc) in _CONTAINER_MISSING_CODES:
                    raise

        self._call("delete", key, delete_once)

    #: A blob batch request takes 256 sub-requests at most.
    delete_batch_size = 256
    parallel_reads = 16

    def _delete_batch(self, keys: Sequence[str]) -> None:
        names = [self._key(key) for key in keys]

        def delete_once() -> None:
            answers = self._container.delete_blobs(*names, raise_on_any_failure=False)
            failed = [
                (name, answer.status_code)
                for name, answer in zip(names, answers, strict=True)
                if answer.status_code not in (200, 202, 404)
            ]
            if failed:
                name, status = failed[0]
                raise StorageError(
                    f"deleting {len(failed)} of {len(names)} blob(s) in {self.url} failed, the first "
                    f"{name}: HTTP {status}",
                    hint="check the credentials may delete blobs and run prune again",
                    retryable=any(status >= 500 or status == 429 for _, status in failed),
                )

        self._call("delete", keys[0] if keys else None, delete_once)


def _service_client(
    location: AzureLocation, settings: StorageSettings, check_timeout_secs: float | None
) -> BlobServiceClient:
    """The blob service the settings name, with the SDK's own retries off: kbackup.core.retry is the
    one retry layer, so storage.max_attempts and retry_timeout_secs bound every try and wait."""
    azure = settings.azure
    options: dict[str, Any] = {
        "retry_total": 0,
        "connection_timeout": check_timeout_secs or 10,
        "read_timeout": check_timeout_secs or 60,
        "max_single_put_size": SINGLE_PUT_SIZE,
        "max_block_size": BLOCK_SIZE,
    }
    if azure is not None and azure.connection_string is not None:
        return BlobServiceClient.from_connection_string(azure.connection_string.get_secret_value(), **options)
    account = location.account or (azure.account_name if azure else None)
    endpoint = azure.endpoint if azure is not None and azure.endpoint else None
    if endpoint is None:
        endpoint = f"https://{account}.blob.{location.endpoint_suffix or 'core.windows.net'}"
    credential: Any
    if azure is not None and azure.account_key is not None:
        credential = {"account_name": account, "account_key": azure.account_key.get_secret_value()}
    elif azure is not None and azure.sas_token is not None:
        credential = azure.sas_token.get_secret_value().lstrip("?")
        # The whole token is registered as a secret; its signature is masked on its own as well,
        # since a request URL carries it escaped differently from the token as written.
        for name, value in parse_qsl(credential):
            if name == "sig":
                register_secret(value)
                register_secret(quote(value, safe=""))
    else:
        if endpoint.startswith("http://"):
            # The SDK refuses to send a token over plain HTTP, on every request and every try.
            raise StorageError(
                f"no Azure credentials for the plain-HTTP endpoint {endpoint}: DefaultAzureCredential's "
                "tokens are sent over https only",
                hint="set storage.azure.account_key, sas_token or connection_string (write ${ENV_VAR})",
            )
        from azure.identity import DefaultAzureCredential  # only a store that uses it imports it

        credential = DefaultAzureCredential()
    return BlobServiceClient(endpoint, credential=credential, **options)


def _error_code(exc: AzureError) -> str | None:
    """The service's error code (``BlobNotFound``, ``ContainerNotFound``), if it sent one."""
    code = getattr(exc, "error_code", None)
    # The SDK gives a StorageErrorCode (a str enum) for the codes it knows, a plain str otherwise.
    return None if code is None else str(getattr(code, "value", code))


def _timestamp(modified: Any) -> float | None:
    return modified.timestamp() if modified is not None else None
