"""Key-encryption keys: the key that wraps an encrypted backup's own key (docs/security.md).

Three sources, one interface: a key file, an environment variable (both a 256-bit key in
base64, wrapping with AES-256-GCM from ``cryptography``), or an AWS KMS key (wrapping done by
KMS through boto3; the key never leaves it). Each wrap binds a context (the backup id and the
keyring generation) as authenticated data, so a wrapped key copied to another backup or
generation does not open.

The key bytes are held only in memory, never printed: ``repr`` and ``key_id`` name the key
without revealing it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from kbackup.core.config import EncryptionSettings, StorageSettings
from kbackup.core.errors import EncryptionKeyError
from kbackup.core.secrets import register_secret

#: AES-256: a key-encryption key and every key it wraps are 32 bytes.
KEY_BYTES = 32
_NONCE_BYTES = 12
#: The HMAC label of a local key's id: the id names the key, and reveals nothing of it.
_KEY_ID_LABEL = b"kafka-backup key id v1"


class KeyEncryptionKey(ABC):
    """Wraps and unwraps a backup's key; never shows its own."""

    #: ``file``, ``env`` or ``aws-kms``.
    kind: str
    #: Names the key without revealing it; recorded beside each wrapped key.
    key_id: str
    #: Where the key comes from, safe to print (a path, a variable's name, a KMS key id).
    source: str

    @abstractmethod
    def wrap(self, plaintext: bytes, context: Mapping[str, str]) -> bytes: ...

    @abstractmethod
    def unwrap(self, wrapped: bytes, context: Mapping[str, str], *, what: str) -> bytes:
        """The plaintext; an ``EncryptionKeyError`` naming ``what`` if this key does not open it."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.source}, id {self.key_id})"


def _context_bytes(context: Mapping[str, str]) -> bytes:
    return json.dumps(dict(context), sort_keys=True, separators=(",", ":")).encode()


class LocalKey(KeyEncryptionKey):
    """A 256-bit key read from a file or an environment variable."""

    def __init__(self, key: bytes, *, kind: str, source: str) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError("a key-encryption key is 32 bytes")
        self._aead = AESGCM(key)
        self.kind = kind
        self.source = source
        self.key_id = "local:" + hmac.new(key, _KEY_ID_LABEL, hashlib.sha256).hexdigest()[:32]

    def wrap(self, plaintext: bytes, context: Mapping[str, str]) -> bytes:
        # A fresh random nonce per wrap: a key-encryption key wraps a handful of keys in its life.
        nonce = os.urandom(_NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, plaintext, _context_bytes(context))

    def unwrap(self, wrapped: bytes, context: Mapping[str, str], *, what: str) -> bytes:
        try:
            return self._aead.decrypt(wrapped[:_NONCE_BYTES], wrapped[_NONCE_BYTES:], _context_bytes(context))
        except (InvalidTag, ValueError):
            raise EncryptionKeyError(
                f"{what} does not open with the {self.source} (key id {self.key_id}): "
                "another key wrapped it, or it was changed",
                hint="configure the key this backup was written or re-keyed with",
            ) from None


def decode_key(text: str, source: str) -> bytes:
    """A key as a file or variable holds it: base64 of 32 bytes (surrounding blanks ignored).
    The text is registered with the redactor: it is masked wherever it might be printed."""
    register_secret(text.strip())
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise EncryptionKeyError(
            f"the {source} does not hold a 256-bit key in base64",
            hint="write a new key with 'kafka-backup keygen --output FILE' (44 base64 characters)",
        )
    return key


def new_key_text() -> str:
    """A new random key-encryption key, as a key file holds it."""
    return base64.b64encode(os.urandom(KEY_BYTES)).decode() + "\n"


class KmsKey(KeyEncryptionKey):
    """An AWS KMS key: KMS wraps and unwraps, the key stays in KMS."""

    kind = "aws-kms"

    def __init__(self, key_id: str, client: Any, endpoint: str | None) -> None:
        self.key_id = key_id
        self.source = f"KMS key {key_id}" + (f" at {endpoint}" if endpoint else "")
        self._client = client
        self._endpoint = endpoint or "AWS KMS"

    def wrap(self, plaintext: bytes, context: Mapping[str, str]) -> bytes:
        answer = self._call(
            "encrypt with",
            lambda: self._client.encrypt(
                KeyId=self.key_id, Plaintext=plaintext, EncryptionContext=dict(context)
            ),
        )
        return bytes(answer["CiphertextBlob"])

    def unwrap(self, wrapped: bytes, context: Mapping[str, str], *, what: str) -> bytes:
        answer = self._call(
            f"open {what} with",
            lambda: self._client.decrypt(
                KeyId=self.key_id, CiphertextBlob=wrapped, EncryptionContext=dict(context)
            ),
        )
        return bytes(answer["Plaintext"])

    def _call(self, action: str, request: Any) -> Any:
        from botocore import exceptions as botocore_errors

        try:
            return request()
        except botocore_errors.ClientError as exc:
            error = exc.response.get("Error", {})
            code, message = error.get("Code", "?"), error.get("Message", "")
            hint = {
                "NotFoundException": "check storage.encryption.kms_key_id (an id, ARN or alias/NAME) "
                "and the KMS region",
                "DisabledException": "enable the key in KMS, or re-key the backup to another one",
                "AccessDeniedException": "configure the KMS key this backup was written or re-keyed with, "
                "and grant kms:Encrypt and kms:Decrypt on it to these credentials",
                "IncorrectKeyException": "configure the KMS key this backup was written or re-keyed with",
                "InvalidCiphertextException": "configure the KMS key this backup was written or re-keyed "
                "with; if it is that key, the wrapped key was changed",
            }.get(code, "check the KMS key and the permissions of these credentials")
            retryable = code in {"KMSInternalException", "ThrottlingException", "DependencyTimeoutException"}
            raise EncryptionKeyError(
                f"{self._endpoint} refused to {action} {self.key_id}: {code} {message}".rstrip(),
                hint=hint,
                retryable=retryable,
            ) from None
        except (botocore_errors.EndpointConnectionError, botocore_errors.ConnectTimeoutError) as exc:
            raise EncryptionKeyError(
                f"KMS at {self._endpoint} cannot be reached to {action} {self.key_id}: {exc}",
                hint="check storage.encryption.kms_endpoint_url (or storage.endpoint_url) and the network; "
                "running again may succeed",
                retryable=True,
            ) from None
        except botocore_errors.NoCredentialsError:
            raise EncryptionKeyError(
                f"no AWS credentials to {action} {self.key_id}",
                hint="set storage.access_key_id and storage.secret_access_key, or the AWS environment",
            ) from None
        except botocore_errors.BotoCoreError as exc:
            raise EncryptionKeyError(
                f"KMS at {self._endpoint}: cannot {action} {self.key_id}: {exc}", retryable=True
            ) from None


def open_key(settings: EncryptionSettings, storage: StorageSettings | None = None) -> KeyEncryptionKey:
    """The key-encryption key the settings name; a file or variable is read now, KMS asked later."""
    if settings.key_file:
        path = Path(settings.key_file)
        source = f"key file {path}"
        try:
            text = path.read_text(encoding="ascii")
        except FileNotFoundError:
            raise EncryptionKeyError(
                f"the {source} does not exist",
                hint="check storage.encryption.key_file (or --encryption-key file:PATH); "
                "'kafka-backup keygen --output FILE' writes a new key",
            ) from None
        except (OSError, ValueError) as exc:  # a folder, not ASCII, a NUL in the name
            raise EncryptionKeyError(f"the {source} cannot be read: {exc}") from None
        return LocalKey(decode_key(text, source), kind="file", source=source)
    if settings.key_env:
        source = f"environment variable {settings.key_env}"
        value = os.environ.get(settings.key_env)
        if not value:
            raise EncryptionKeyError(
                f"the {source} is not set (storage.encryption.key_env names it)",
                hint=f"export {settings.key_env} with the backup's key in base64",
            )
        return LocalKey(decode_key(value, source), kind="env", source=source)
    assert settings.kms_key_id is not None  # EncryptionSettings allows exactly one of the three
    import boto3
    from botocore.config import Config

    endpoint = settings.kms_endpoint_url or (storage.endpoint_url if storage is not None else None)
    region = settings.kms_region or (storage.region if storage is not None else None)
    credentials: dict[str, Any] = {}
    if storage is not None:
        for argument, secret in (
            ("aws_access_key_id", storage.access_key_id),
            ("aws_secret_access_key", storage.secret_access_key),
            ("aws_session_token", storage.session_token),
        ):
            if secret is not None:
                credentials[argument] = secret.get_secret_value()
    client = boto3.session.Session().client(
        "kms",
        endpoint_url=endpoint,
        # No region anywhere (none set, none in the AWS environment): KMS's own default.
        region_name=region or boto3.session.Session().region_name or "us-east-1",
        # total_max_attempts counts every try (botocore's max_attempts counts the retries).
        config=Config(
            retries={"total_max_attempts": 3, "mode": "standard"}, connect_timeout=5, read_timeout=30
        ),
        **credentials,
    )
    return KmsKey(settings.kms_key_id, client, endpoint)
