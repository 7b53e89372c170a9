"""Object storage: one interface over a local folder, S3, Google Cloud Storage or Azure Blob Storage,
picked by the storage URL."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

from kbackup.core.config import AZURE_SCHEMES, StorageSettings, azure_location, validate_config
from kbackup.core.errors import ConfigError, StorageError
from kbackup.storage.base import ObjectInfo, Storage, check_key
from kbackup.storage.keys import KeyEncryptionKey, open_key
from kbackup.storage.local import LocalStorage

__all__ = [
    "KeyEncryptionKey",
    "LocalStorage",
    "ObjectInfo",
    "Storage",
    "check_key",
    "open_key",
    "open_storage",
]


def open_storage(settings: StorageSettings | str, *, check_timeout_secs: float | None = None) -> Storage:
    """The storage a URL names: ``s3://bucket/prefix``, ``gs://bucket/prefix``,
    ``az://container/prefix`` (or ``abfs://container@account.dfs.core.windows.net/prefix``),
    ``file:///folder`` or a plain folder path.

    ``check_timeout_secs`` (``check``): each S3, GCS or Azure request is tried once, with this
    connect and read timeout, instead of being retried for ``storage.retry_timeout_secs``.
    """
    if isinstance(settings, str):
        settings = validate_config({"url": settings}, StorageSettings, "storage url")
    storage = _open_location(settings, check_timeout_secs)
    # Read now, before any object: a key file that is missing fails the command at its start.
    storage.key_encryption_key = open_key(settings.encryption, settings) if settings.encryption else None
    return storage


def _open_location(settings: StorageSettings, check_timeout_secs: float | None) -> Storage:
    url = settings.resolved_url()
    parsed = urlparse(url)
    if parsed.scheme in ("s3", "gs"):
        if not parsed.netloc:
            raise ConfigError(f"storage url {url!r}: expected {parsed.scheme}://bucket[/prefix]")
        prefix = _safe_prefix(url, unquote(parsed.path).strip("/"), f"{parsed.scheme}://bucket/backups/prod")
        if parsed.scheme == "gs":
            from kbackup.storage.gcs import GcsStorage

            return GcsStorage(parsed.netloc, prefix, settings, check_timeout_secs=check_timeout_secs)
        from kbackup.storage.s3 import S3Storage

        return S3Storage(parsed.netloc, prefix, settings, check_timeout_secs=check_timeout_secs)
    if parsed.scheme in AZURE_SCHEMES:
        try:
            location = azure_location(url)
        except ValueError as exc:
            raise ConfigError(f"storage url: {exc}") from None
        _safe_prefix(url, location.prefix, "az://container/backups/prod")
        from kbackup.storage.azure import AzureBlobStorage

        return AzureBlobStorage(url, settings, check_timeout_secs=check_timeout_secs)
    if parsed.scheme == "file":
        return LocalStorage(Path(unquote(parsed.path)))
    return LocalStorage(Path(url))


def _safe_prefix(url: str, prefix: str, example: str) -> str:
    """The key prefix of a bucket or container URL, if it is made of safe segments like every
    object key below it: keys are plain strings, but path-style endpoints (MinIO, proxies,
    emulators) normalise '..' and '.'."""
    if prefix:
        try:
            check_key(prefix)
        except StorageError as exc:
            raise ConfigError(
                f"storage url {url!r}: the prefix {prefix!r} is not a safe relative path "
                "(no '..', '.', empty segments or characters outside letters, digits and . _ = + @ , -)",
                hint=f"name a plain prefix such as {example}",
            ) from exc
    return prefix
