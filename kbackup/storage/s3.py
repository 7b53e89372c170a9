"""An S3 bucket prefix as object storage (AWS, MinIO, moto: anything with an S3 endpoint)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import boto3
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore import exceptions as botocore_errors
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from kbackup.core.config import StorageSettings
from kbackup.core.errors import StorageError
from kbackup.core.logs import get_logger
from kbackup.storage.base import ObjectInfo, check_key
from kbackup.storage.remote import RemoteStorage, os_reason, unresolvable

log = get_logger("storage.s3")
T = TypeVar("T")

#: Uploads above this size go in parts, so memory stays bounded whatever the segment size.
MULTIPART_THRESHOLD = 64 * 1024 * 1024

_NOT_FOUND_CODES = {"404", "NoSuchKey", "NotFound"}
#: Error codes S3 and S3-compatible stores send when they ask the client to slow down or retry.
_TRANSIENT_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "ServiceUnavailable"}
_DENIED_CODES = {"AccessDenied", "AllAccessDisabled", "AccountProblem", "403"}
#: Credentials the store does not accept, and what to check for each.
_REJECTED_CREDENTIALS = {
    "InvalidAccessKeyId": "the access key is unknown to the store: check storage.access_key_id "
    "(or AWS_ACCESS_KEY_ID, or the AWS profile in use)",
    "SignatureDoesNotMatch": "the secret key does not belong to the access key: check "
    "storage.secret_access_key (or AWS_SECRET_ACCESS_KEY)",
    "ExpiredToken": "the temporary credentials expired: get fresh ones (storage.session_token or "
    "AWS_SESSION_TOKEN)",
    "InvalidToken": "the session token is malformed: check storage.session_token (or AWS_SESSION_TOKEN)",
    "TokenRefreshRequired": "the session token must be refreshed: get fresh temporary credentials",
}
#: The bucket is in another region than the requests were signed for.
_WRONG_REGION_CODES = {
    "AuthorizationHeaderMalformed",
    "PermanentRedirect",
    "301",
    "IllegalLocationConstraintException",
}
#: Where botocore looked for the credential a PartialCredentialsError says is missing.
_CREDENTIAL_KEYS = {
    "aws_access_key_id": "storage.access_key_id",
    "aws_secret_access_key": "storage.secret_access_key",
    "aws_session_token": "storage.session_token",
}
#: Failures on the way to the store that can go away by themselves: a refused or reset connection,
#: a timeout, a response cut short. Any other botocore error (no credentials, an invalid endpoint
#: or bucket name, a TLS certificate not trusted) stays until something is changed.
_TRANSIENT_ERRORS = (
    botocore_errors.ConnectionError,
    botocore_errors.HTTPClientError,
    botocore_errors.IncompleteReadError,
)


class S3Storage(RemoteStorage):
    retry_log = log

    def __init__(
        self,
        bucket: str,
        prefix: str,
        settings: StorageSettings,
        *,
        check_timeout_secs: float | None = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.endpoint = settings.endpoint_url
        self.region = settings.region
        self._take_patience(settings, check_timeout_secs)
        credentials: dict[str, Any] = {}
        if settings.access_key_id is not None:
            credentials["aws_access_key_id"] = settings.access_key_id.get_secret_value()
        if settings.secret_access_key is not None:
            credentials["aws_secret_access_key"] = settings.secret_access_key.get_secret_value()
        if settings.session_token is not None:
            credentials["aws_session_token"] = settings.session_token.get_secret_value()
        checking = check_timeout_secs is not None
        try:
            # botocore looks for credentials here (explicit ones, then the environment, the
            # profile, the instance role): a partial set fails now, none at all on the first request.
            self._client = boto3.session.Session().client(
                "s3",
                endpoint_url=settings.endpoint_url,
                region_name=settings.region,
                config=Config(
                    # botocore tries each request once: kbackup.core.retry is the one retry layer,
                    # so storage.max_attempts and retry_timeout_secs bound every try and wait.
                    retries={"total_max_attempts": 1, "mode": "standard"},
                    connect_timeout=check_timeout_secs if checking else 10,
                    read_timeout=check_timeout_secs if checking else 60,
                    s3={"addressing_style": "path"} if settings.endpoint_url else None,
                ),
                **credentials,
            )
        except BotoCoreError as exc:
            raise self._error(exc, "connect to") from None
        #: Sent with every object written: server-side encryption covers manifests as well as data.
        self._extra_args: dict[str, Any] = {}
        if settings.sse is not None:
            self._extra_args["ServerSideEncryption"] = settings.sse
            if settings.sse_kms_key_id:
                self._extra_args["SSEKMSKeyId"] = settings.sse_kms_key_id
        #: Sent with the segments only (put_file, move_file: the only writes of record data). The
        #: manifests, leases, keyrings and group snapshots stay STANDARD: they are small, read by
        #: every list, status and restore, and rewritten, and the infrequent-access classes bill
        #: each object at least 128 KiB and 30 days, and each read.
        self._data_args = dict(self._extra_args)
        if settings.storage_class is not None:
            self._data_args["StorageClass"] = settings.storage_class
        self._transfer = TransferConfig(
            multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=32 * 1024 * 1024
        )

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _error(self, exc: Exception, action: str, key: str | None = None) -> StorageError:
        """One StorageError naming the object and what to do; retryable only if waiting can fix it."""
        where = f"{self.url}/{key}" if key else self.url
        if isinstance(exc, ClientError):
            return self._client_error(exc, action, where, key)
        endpoint = self.endpoint or "AWS S3"
        if isinstance(exc, botocore_errors.NoCredentialsError):
            return StorageError(
                f"no S3 credentials to {action} {where}: storage.access_key_id and "
                "storage.secret_access_key are not set, and boto3 found none in the environment, "
                "the AWS profile or an instance role",
                hint="set storage.access_key_id and storage.secret_access_key (write ${ENV_VAR} for "
                "secrets), or export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            )
        if isinstance(exc, botocore_errors.PartialCredentialsError):
            provider = str(exc.kwargs.get("provider", ""))
            missing = str(exc.kwargs.get("cred_var", "a credential"))
            if provider == "explicit":
                missing, given = _CREDENTIAL_KEYS.get(missing, missing), "the storage section"
            else:
                given = "the environment" if provider == "env" else f"the AWS {provider}"
            return StorageError(
                f"partial S3 credentials in {given}: {missing} is not set ({action} {where})",
                hint=f"set {missing}, or remove the other credential keys to use boto3's default chain",
            )
        if isinstance(exc, botocore_errors.EndpointConnectionError) and unresolvable(exc) and self.endpoint:
            return StorageError(
                f"the host of storage.endpoint_url {self.endpoint} does not resolve ({action} {where})",
                hint="check storage.endpoint_url",
            )
        if isinstance(exc, _TRANSIENT_ERRORS) and "CERTIFICATE_VERIFY_FAILED" not in str(exc):
            reason = os_reason(exc)
            failure = (
                f"cannot connect to {endpoint} ({reason})"
                if isinstance(exc, botocore_errors.EndpointConnectionError) and reason
                else f"{exc} (endpoint {endpoint})"
            )
            return StorageError(
                f"{action} {where} failed: {failure}",
                hint="check storage.endpoint_url and that the object store is reachable",
                retryable=True,
            )
        return StorageError(
            f"{action} {where} failed: {exc} (endpoint {endpoint})",
            hint="check storage.endpoint_url, storage.region and the bucket name",
        )

    def _client_error(self, exc: ClientError, action: str, where: str, key: str | None) -> StorageError:
        code = str(exc.response.get("Error", {}).get("Code", "unknown"))
        if code == "NoSuchBucket":
            return StorageError(
                f"bucket {self.bucket} does not exist ({action} {where})",
                hint="create the bucket or fix storage.url",
            )
        if code in _REJECTED_CREDENTIALS:
            return StorageError(
                f"the S3 credentials were rejected ({code}) while trying to {action} {where}",
                hint=_REJECTED_CREDENTIALS[code],
            )
        if code in _DENIED_CODES:
            return StorageError(
                f"access to {where} denied ({code}) while trying to {action}",
                hint="check the S3 credentials and the bucket policy",
            )
        if code in _WRONG_REGION_CODES:
            region = self.region or "the default region"
            return StorageError(
                f"bucket {self.bucket} is not in {region} ({code}) while trying to {action} {where}",
                hint="set storage.region to the bucket's region",
            )
        if code in _NOT_FOUND_CODES:
            return StorageError(f"object {key} not found in {self.url}")
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        return StorageError(
            f"{action} {where} failed: {code}", retryable=status >= 500 or code in _TRANSIENT_CODES
        )

    def _failure(self, exc: Exception, action: str, key: str | None) -> tuple[StorageError, bool] | None:
        cause: Exception
        if isinstance(exc, ClientError | BotoCoreError):
            cause = exc
        elif isinstance(exc, Boto3Error):
            # upload_file/download_file wrap a ClientError (S3UploadFailedError, raised while
            # handling it) or give up on their own (RetriesExceededError): report the inner error.
            inner = exc.__cause__ or exc.__context__
            cause = inner if isinstance(inner, ClientError | BotoCoreError) else exc
        else:
            return None
        # The store answered: "no such key" is an answer (a reader looks before it writes).
        answered = isinstance(cause, ClientError) and _code(cause) in _NOT_FOUND_CODES
        return self._error(cause, action, key), answered

    def put_bytes(self, key: str, data: bytes) -> None:
        self._call(
            "write",
            key,
            lambda: self._client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=data, **self._extra_args
            ),
        )

    def put_file(self, key: str, path: Path) -> None:
        self._call(
            "upload",
            key,
            lambda: self._client.upload_file(
                str(path),
                self.bucket,
                self._key(key),
                ExtraArgs=self._data_args or None,
                Config=self._transfer,
            ),
        )

    def put_bytes_if_absent(self, key: str, data: bytes) -> bool:
        def put_once() -> bool:
            try:
                self._client.put_object(
                    Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*", **self._extra_args
                )
            except ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code")) not in ("PreconditionFailed", "412"):
                    raise
                # The object exists. It is ours if an earlier try of ours was stored but its
                # answer was lost; only different bytes mean another writer got there first.
                return self._read(key) == data
            return True

        return self._call("write", key, put_once)

    def list_prefixes(self, prefix: str = "") -> list[str]:
        if prefix:
            check_key(prefix.rstrip("/"))
        full_prefix = f"{self.prefix}/{prefix}" if self.prefix else prefix
        names: list[str] = []
        for page in self._pages("list", prefix or None, Prefix=full_prefix, Delimiter="/"):
            for common in page.get("CommonPrefixes", []):
                names.append(common["Prefix"][len(full_prefix) :].rstrip("/"))
        return sorted(names)

    def _pages(self, action: str, key: str | None, **request: Any) -> Iterator[dict[str, Any]]:
        """list_objects_v2 page by page through boto3's paginator, each page retried on its own (a
        listing can be long): a paginator ends at its first failure, so the next try starts a new
        one at the continuation token of the last page yielded."""
        paginator = self._client.get_paginator("list_objects_v2")
        resume: dict[str, Any] = {}
        pages: Iterator[Any] | None = None

        def next_page() -> dict[str, Any] | None:
            nonlocal pages
            if pages is None:
                pages = iter(paginator.paginate(Bucket=self.bucket, **request, **resume))
            try:
                page = next(pages, None)
            except Exception:
                pages = None
                raise
            return None if page is None else dict(page)

        while (page := self._call(action, key, next_page)) is not None:
            yield page
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            resume = {"ContinuationToken": token}

    def _read(self, key: str) -> bytes:
        body: bytes = self._client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        return body

    def get_bytes(self, key: str) -> bytes:
        return self._call("read", key, lambda: self._read(key))

    def download(self, key: str, path: Path) -> None:
        self._call(
            "download",
            key,
            lambda: self._client.download_file(self.bucket, self._key(key), str(path), Config=self._transfer),
        )

    def size(self, key: str) -> int | None:
        def head() -> int | None:
            try:
                response = self._client.head_object(Bucket=self.bucket, Key=self._key(key))
            except ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code")) in _NOT_FOUND_CODES:
                    return None
                raise
            return int(response["ContentLength"])

        return self._call("look up", key, head)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        full_prefix = f"{self.prefix}/{prefix}" if self.prefix else prefix
        strip = len(self.prefix) + 1 if self.prefix else 0
        for page in self._pages("list", prefix or None, Prefix=full_prefix):
            for item in page.get("Contents", []):
                modified = item.get("LastModified")
                yield ObjectInfo(
                    item["Key"][strip:], int(item["Size"]), modified.timestamp() if modified else None
                )

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: self._client.delete_object(Bucket=self.bucket, Key=self._key(key)))

    delete_batch_size = 1000
    parallel_reads = 16

    def _delete_batch(self, keys: Sequence[str]) -> None:
        objects: Any = [{"Key": self._key(key)} for key in keys]

        def delete_once() -> None:
            answer = self._client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
            )
            failed = answer.get("Errors") or []
            if failed:
                first = failed[0]
                raise StorageError(
                    f"deleting {len(failed)} of {len(objects)} object(s) in {self.url} failed, the first "
                    f"{first.get('Key')}: {first.get('Code')} {first.get('Message', '')}".rstrip(),
                    hint="check the credentials may delete (s3:DeleteObject) and run prune again",
                )

        self._call("delete", keys[0] if keys else None, delete_once)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", "unknown"))
