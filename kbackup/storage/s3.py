"""An S3 bucket prefix as object storage (AWS, MinIO, moto: anything with an S3 endpoint)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from kbackup.core.config import StorageSettings
from kbackup.core.errors import StorageError
from kbackup.storage.base import ObjectInfo, Storage, check_key

#: Uploads above this size go in parts, so memory stays bounded whatever the segment size.
MULTIPART_THRESHOLD = 64 * 1024 * 1024

_NOT_FOUND_CODES = {"404", "NoSuchKey", "NotFound"}


class S3Storage(Storage):
    def __init__(self, bucket: str, prefix: str, settings: StorageSettings) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self.endpoint = settings.endpoint_url
        credentials: dict[str, Any] = {}
        if settings.access_key_id is not None:
            credentials["aws_access_key_id"] = settings.access_key_id.get_secret_value()
        if settings.secret_access_key is not None:
            credentials["aws_secret_access_key"] = settings.secret_access_key.get_secret_value()
        if settings.session_token is not None:
            credentials["aws_session_token"] = settings.session_token.get_secret_value()
        self._client = boto3.session.Session().client(
            "s3",
            endpoint_url=settings.endpoint_url,
            region_name=settings.region,
            config=Config(
                retries={"max_attempts": settings.max_attempts, "mode": "standard"},
                connect_timeout=10,
                read_timeout=60,
                s3={"addressing_style": "path"} if settings.endpoint_url else None,
            ),
            **credentials,
        )
        self._extra_args: dict[str, Any] = {}
        if settings.sse is not None:
            self._extra_args["ServerSideEncryption"] = settings.sse
            if settings.sse_kms_key_id:
                self._extra_args["SSEKMSKeyId"] = settings.sse_kms_key_id
        self._transfer = TransferConfig(
            multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=32 * 1024 * 1024
        )

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _error(self, exc: Exception, action: str, key: str | None = None) -> StorageError:
        where = f"{self.url}/{key}" if key else self.url
        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", "unknown"))
            if code == "NoSuchBucket":
                return StorageError(
                    f"bucket {self.bucket} does not exist ({action} {where})",
                    hint="create the bucket or fix storage.url",
                )
            if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
                return StorageError(
                    f"access to {where} denied ({code}) while trying to {action}",
                    hint="check the S3 credentials and the bucket policy",
                )
            if code in _NOT_FOUND_CODES:
                return StorageError(f"object {key} not found in {self.url}")
            return StorageError(f"{action} {where} failed: {code}", retryable=code.startswith("5"))
        endpoint = self.endpoint or "AWS S3"
        return StorageError(
            f"{action} {where} failed: {exc} (endpoint {endpoint})",
            hint="check storage.endpoint_url and that the object store is reachable",
            retryable=True,
        )

    def put_bytes(self, key: str, data: bytes) -> None:
        try:
            self._client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, **self._extra_args)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, "write", key) from None

    def put_file(self, key: str, path: Path) -> None:
        try:
            self._client.upload_file(
                str(path),
                self.bucket,
                self._key(key),
                ExtraArgs=self._extra_args or None,
                Config=self._transfer,
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, "upload", key) from None
        except Exception as exc:  # boto3's S3UploadFailedError wraps the ClientError
            cause = exc.__cause__ if isinstance(exc.__cause__, ClientError | BotoCoreError) else exc
            raise self._error(cause, "upload", key) from None

    def put_bytes_if_absent(self, key: str, data: bytes) -> bool:
        try:
            self._client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*", **self._extra_args
            )
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in ("PreconditionFailed", "412"):
                return False
            raise self._error(exc, "write", key) from None
        except BotoCoreError as exc:
            raise self._error(exc, "write", key) from None
        return True

    def list_prefixes(self, prefix: str = "") -> list[str]:
        if prefix:
            check_key(prefix.rstrip("/"))
        full_prefix = f"{self.prefix}/{prefix}" if self.prefix else prefix
        names: list[str] = []
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full_prefix, Delimiter="/"):
                for common in page.get("CommonPrefixes", []):
                    names.append(common["Prefix"][len(full_prefix) :].rstrip("/"))
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, "list", prefix or None) from None
        return sorted(names)

    def get_bytes(self, key: str) -> bytes:
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=self._key(key))
            body: bytes = response["Body"].read()
            return body
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, "read", key) from None

    def download(self, key: str, path: Path) -> None:
        try:
            self._client.download_file(self.bucket, self._key(key), str(path), Config=self._transfer)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, "download", key) from None

    def size(self, key: str) -> int | None:
        try:
            response = self._client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in _NOT_FOUND_CODES:
                return None
            raise self._error(exc, "look up", key) from None
        except BotoCoreError as exc:
            raise self._error(exc, "look up", key) from None
        return int(response["ContentLength"])

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        full_prefix = f"{self.prefix}/{prefix}" if self.prefix else prefix
        strip = len(self.prefix) + 1 if self.prefix else 0
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=full_prefix):
                for item in page.get("Contents", []):
                    yield ObjectInfo(item["Key"][strip:], int(item["Size"]))
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, "list", prefix or None) from None

    def delete(self, key: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, "delete", key) from None
