"""Typed configuration: YAML files validated with pydantic before any network call.

The shapes shared by every stage live here: a Kafka connection (with any
librdkafka property and secrets held as ``SecretStr``), object storage, and
the loader that turns a YAML file into a model or a ``ConfigError`` naming
the file, the key and what was expected. Each stage keeps its own section
model in its own package; ``kbackup.app.config`` assembles the file's root.
"""

from __future__ import annotations

import difflib
import os
import re
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin
from urllib.parse import parse_qsl, urlparse, urlunparse

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from kbackup.core.errors import ConfigError
from kbackup.core.secrets import (
    REDACTED,
    has_url_userinfo,
    is_secret_key,
    mask_url_userinfo,
    printable_url,
    register_secret,
)

#: The largest offset or timestamp Kafka can hold (a signed 64-bit integer); bigger numbers in a
#: config, mapping or plan file are refused when read instead of failing deep inside a client.
KAFKA_INT64_MAX = 2**63 - 1
#: Partition numbers are signed 32-bit integers in Kafka's protocol.
KAFKA_INT32_MAX = 2**31 - 1


class StrictModel(BaseModel):
    """A config section: unknown keys are errors, so a typo never passes silently."""

    model_config = ConfigDict(extra="forbid", validate_default=True)


class KafkaSecurity(StrictModel):
    """Authentication and encryption; each key maps to the librdkafka property of the same name."""

    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] | None = Field(
        default=None, description="librdkafka `security.protocol`; unset: PLAINTEXT."
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"] | None = (
        Field(default=None, description="librdkafka `sasl.mechanism` (with a SASL_* protocol).")
    )
    sasl_username: str | None = Field(default=None, description="librdkafka `sasl.username`.")
    sasl_password: SecretStr | None = Field(
        default=None, description="librdkafka `sasl.password`; a secret: write `${ENV_VAR}`, never printed."
    )
    ssl_ca_location: str | None = Field(
        default=None, description="librdkafka `ssl.ca.location`: PEM file of the CAs that signed the brokers."
    )
    ssl_certificate_location: str | None = Field(
        default=None, description="librdkafka `ssl.certificate.location`: client certificate (mutual TLS)."
    )
    ssl_key_location: str | None = Field(
        default=None, description="librdkafka `ssl.key.location`: the client certificate's private key."
    )
    ssl_key_password: SecretStr | None = Field(
        default=None, description="librdkafka `ssl.key.password`; a secret, never printed."
    )
    ssl_endpoint_identification_algorithm: Literal["https", "none"] | None = Field(
        default=None,
        description="librdkafka `ssl.endpoint.identification.algorithm`: `none` skips the host name check.",
    )


class KafkaConnection(StrictModel):
    """How to reach one Kafka cluster."""

    bootstrap_servers: list[str] = Field(
        min_length=1,
        description="`host:port` of one or more brokers (a list, or one comma-separated string).",
    )
    security: KafkaSecurity = Field(
        default_factory=KafkaSecurity, description="Authentication and encryption."
    )
    properties: dict[str, str | SecretStr] = Field(
        default_factory=dict,
        description=(
            "Any further librdkafka property, e.g. `{client.id: backup-1}`. Values whose names look "
            "secret (password, secret, jaas, token, credential, private key) are held as secrets."
        ),
    )
    connect_timeout_secs: float = Field(
        default=15.0, gt=0, le=3600, description="Seconds to wait for the first answer of a broker."
    )

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _split_comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_host_port(cls, servers: list[str]) -> list[str]:
        for server in servers:
            if "@" in server:
                # 'user:password@host:9092' would pass as host 'user:password@host' and reach
                # librdkafka's logs; Kafka takes credentials from the security keys only.
                raise ValueError(
                    "expected host:port, got a server with '@' (a user name or password?): "
                    "credentials go in security.sasl_username and security.sasl_password"
                )
            host, _, port = server.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"expected host:port, got {server!r}")
            if not 1 <= int(port) <= 65535:
                # Else a command waits its connect timeout on a broker that cannot exist.
                raise ValueError(f"{server!r}: port {int(port)} is not between 1 and 65535")
        return servers

    @field_validator("properties", mode="before")
    @classmethod
    def _stringify_properties(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(item, bool):
                item = "true" if item else "false"
            elif isinstance(item, int | float):
                item = str(item)
            out[str(key)] = SecretStr(item) if is_secret_key(str(key)) and isinstance(item, str) else item
        return out

    def librdkafka_properties(self) -> dict[str, str]:
        """The connection as librdkafka properties, secrets revealed (for the client only)."""
        props: dict[str, str] = {"bootstrap.servers": ",".join(self.bootstrap_servers)}
        for name, value in self.security.model_dump(exclude_none=True).items():
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            props[name.replace("_", ".")] = str(value)
        for name, value in self.properties.items():
            props[name] = value.get_secret_value() if isinstance(value, SecretStr) else value
        return props

    def describe(self) -> str:
        """A one-line description safe to print: servers and protocol, never credentials."""
        protocol = self.security.security_protocol or "PLAINTEXT"
        return f"{','.join(self.bootstrap_servers)} ({protocol})"


StorageBackend = Literal["filesystem", "s3"]

# The storage classes (access tiers) a backup's segments may be written in: those whose objects
# are read at once. A class that needs a restore or rehydration request first (hours, per object)
# would turn every restore into a failure; it is refused offline, pointing at lifecycle rules.
S3StorageClass = Literal[
    "STANDARD",
    "STANDARD_IA",
    "ONEZONE_IA",
    "INTELLIGENT_TIERING",
    "GLACIER_IR",
    "REDUCED_REDUNDANCY",
    "EXPRESS_ONEZONE",
    "OUTPOSTS",
]
#: Cloud Storage reads ARCHIVE objects at once (it only bills more per read): allowed.
GcsStorageClass = Literal["STANDARD", "NEARLINE", "COLDLINE", "ARCHIVE"]
AzureAccessTier = Literal["Hot", "Cool", "Cold"]

_S3_ARCHIVE = (
    "its objects cannot be read until each is restored (hours), so a restore would fail; use "
    "GLACIER_IR (read at once), or move older segments there with a lifecycle rule instead"
)
_AZURE_ARCHIVE = (
    "an archived blob cannot be read until it is rehydrated (hours), so a restore would fail; use "
    "Cool or Cold, or move older segments there with a lifecycle management rule instead"
)
#: projects/P/locations/L/keyRings/R/cryptoKeys/K: a key, not one of its versions.
_GCS_KMS_KEY_NAME = re.compile(r"^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$")
#: Azure's rule for an encryption scope's name.
_AZURE_ENCRYPTION_SCOPE = re.compile(r"^(?=.{3,63}$)[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*$")


def _name_matching(name: str | None, pattern: re.Pattern[str], what: str) -> str | None:
    """``name`` if it has the form of ``what``."""
    if name is not None and not pattern.match(name):
        raise ValueError(f"{name!r} is not {what}")
    return name


def _readable_class(value: Any, accepted: Any, unreadable: Mapping[str, str], cloud: str) -> Any:
    """``value`` if it is not a storage class whose objects must be restored before a read; a class
    written in another case than the cloud's is named in the cloud's spelling."""
    if not isinstance(value, str):
        return value  # the Literal says what is expected
    for name, why in unreadable.items():
        if name.lower() == value.lower():
            raise ValueError(f"{value} is refused: {why}")
    names = get_args(accepted)
    if value not in names:
        spelled = [name for name in names if name.lower() == value.lower()]
        if spelled:
            raise ValueError(f"{value!r} is written {spelled[0]} ({cloud}'s spelling)")
    return value


class GcsStorageSettings(StrictModel):
    """Google Cloud Storage (``gs://bucket/prefix``): the project, the endpoint and the credentials.

    Credentials, first found first: ``credentials_file`` (a service account's JSON key), ``anonymous``
    (an emulator), ``STORAGE_EMULATOR_HOST`` (the Google client's own: that endpoint, no
    credentials), else Google Application Default Credentials.
    """

    project: str | None = Field(
        default=None,
        description=(
            "Google Cloud project id the client is opened for; the requests kafka-backup makes name "
            "only the bucket, so none is needed. Unset: none."
        ),
    )
    endpoint_url: str | None = Field(
        default=None,
        description=(
            "JSON API endpoint for an emulator (fake-gcs-server) or a sovereign cloud; unset: "
            "`STORAGE_EMULATOR_HOST` if set, else https://storage.googleapis.com."
        ),
    )
    credentials_file: str | None = Field(
        default=None,
        description=(
            "A service account's JSON key file; unset: Google Application Default Credentials "
            "(`GOOGLE_APPLICATION_CREDENTIALS`, gcloud's login, the metadata server). Its content is "
            "never printed."
        ),
    )
    anonymous: bool = Field(
        default=False,
        description=(
            "Send no credentials (an emulator at `endpoint_url`); `STORAGE_EMULATOR_HOST` implies it."
        ),
    )
    storage_class: GcsStorageClass | None = Field(
        default=None,
        description=(
            "Storage class of the segment objects (the record data); manifests, leases and keyrings "
            "keep the bucket's default class, since they are small, read by every list, status and "
            "restore, and the colder classes bill a minimum duration and a fee per read. `ARCHIVE` "
            "objects are read at once (no rehydration), so it is accepted. Unset: the bucket's default."
        ),
    )
    kms_key_name: str | None = Field(
        default=None,
        description=(
            "Cloud KMS key of every object written (CMEK): "
            "`projects/P/locations/L/keyRings/R/cryptoKeys/K`, without a key version (the key's "
            "primary version is used). A key's name, not a secret. The "
            "bucket's service agent needs `roles/cloudkms.cryptoKeyEncrypterDecrypter` on it. Unset: "
            "the bucket's default key, else Google-managed encryption."
        ),
    )

    @field_validator("endpoint_url")
    @classmethod
    def _check_endpoint(cls, endpoint: str | None) -> str | None:
        return None if endpoint is None else checked_endpoint(endpoint)

    @field_validator("storage_class", mode="before")
    @classmethod
    def _check_storage_class(cls, value: Any) -> Any:
        return _readable_class(value, GcsStorageClass, {}, "Cloud Storage")

    @field_validator("kms_key_name")
    @classmethod
    def _check_kms_key_name(cls, name: str | None) -> str | None:
        # A version (.../cryptoKeyVersions/1) would be dropped by the client without a word.
        return _name_matching(
            name,
            _GCS_KMS_KEY_NAME,
            "a Cloud KMS key name: expected projects/P/locations/L/keyRings/R/cryptoKeys/K "
            "(no cryptoKeyVersions)",
        )

    @field_validator("credentials_file")
    @classmethod
    def _a_path_not_the_key(cls, value: str | None) -> str | None:
        # The path is shown in errors (it is no secret); a key pasted in its place must not be.
        if value is not None and ("\n" in value or value.lstrip().startswith("{")):
            register_secret(value)
            raise ValueError(
                "holds what looks like the JSON key itself, not the path of its file: save the key "
                "to a file and name the file here"
            )
        return value

    @model_validator(mode="after")
    def _one_credential(self) -> GcsStorageSettings:
        if self.anonymous and self.credentials_file is not None:
            raise ValueError("anonymous sends no credentials and credentials_file names some: keep one")
        return self


class EncryptionSettings(StrictModel):
    """Client-side encryption of backups (docs/security.md): where the key-encryption key is.

    Exactly one of ``key_file``, ``key_env`` and ``kms_key_id``. The key itself never appears in a
    config file: a file or an environment variable holds it, or AWS KMS keeps it.
    """

    key_file: str | None = Field(
        default=None,
        description=(
            "A file holding the 256-bit key-encryption key in base64 (`kafka-backup keygen --output "
            "FILE` writes one). Relative: to the current folder."
        ),
    )
    key_env: str | None = Field(
        default=None,
        description="The name of an environment variable holding the key-encryption key in base64.",
    )
    kms_key_id: str | None = Field(
        default=None,
        description="An AWS KMS key (id, ARN or `alias/NAME`) that wraps the backup's key; KMS keeps it.",
    )
    kms_endpoint_url: str | None = Field(
        default=None,
        description="KMS endpoint (LocalStack, moto); unset: `storage.endpoint_url`, else AWS KMS.",
    )
    kms_region: str | None = Field(default=None, description="KMS region; unset: `storage.region`.")

    @field_validator("key_env")
    @classmethod
    def _check_env_name(cls, name: str | None) -> str | None:
        # Not echoed: what stands here by mistake is most often the key itself.
        if name is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise ValueError("is not an environment variable name (write the variable's name, not its value)")
        return name

    @field_validator("kms_endpoint_url")
    @classmethod
    def _check_kms_endpoint(cls, endpoint: str | None) -> str | None:
        return None if endpoint is None else checked_endpoint(endpoint)

    @model_validator(mode="after")
    def _one_key_source(self) -> EncryptionSettings:
        chosen = [name for name in ("key_file", "key_env", "kms_key_id") if getattr(self, name)]
        if len(chosen) != 1:
            raise ValueError(
                "set exactly one of key_file, key_env and kms_key_id"
                + (f" (found {', '.join(chosen)})" if chosen else "")
            )
        return self

    def describe(self) -> str:
        """Where the key comes from, safe to print (never the key)."""
        if self.key_file:
            return f"key file {self.key_file}"
        if self.key_env:
            return f"environment variable {self.key_env}"
        return f"KMS key {self.kms_key_id}"


def check_patterns(patterns: list[str]) -> list[str]:
    """Regular expressions a config lists (topic selections), compiled once so a bad one is refused
    when the file is read, naming the pattern."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return patterns


def encryption_from_spec(spec: str, source: str) -> EncryptionSettings:
    """``--encryption-key``: ``file:PATH``, ``env:NAME`` or ``kms:KEY_ID``."""
    kind, separator, value = spec.partition(":")
    key = {"file": "key_file", "env": "key_env", "kms": "kms_key_id"}.get(kind)
    if not separator or key is None or not value:
        # Not echoed: what stands here by mistake is most often the key itself.
        raise ConfigError(
            f"{source}: not a key source",
            hint="write file:PATH, env:VARIABLE or kms:KEY_ID (an id, ARN or alias/NAME), not the key",
        )
    return validate_config({key: value}, EncryptionSettings, source, flags={key: source})


#: Storage URL schemes of Azure Blob Storage: ``az://container/prefix``, and the
#: ``abfs(s)://container@account.dfs.core.windows.net/prefix`` spelling Spark and Hadoop users write.
AZURE_SCHEMES = ("az", "abfs", "abfss")
#: Azure's container names: 3-63 lowercase letters, digits and single hyphens, a letter or digit at each end.
_CONTAINER_NAME = re.compile(r"^(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")
_ACCOUNT_NAME = re.compile(r"^[a-z0-9]{3,24}$")
#: The host of an abfs URL: the account, then the Data Lake (dfs) or blob service and the cloud's suffix.
_ABFS_HOST = re.compile(r"^(?P<account>[a-z0-9]{3,24})\.(?:dfs|blob)\.(?P<suffix>[a-z0-9.-]+)$")


@dataclass(frozen=True)
class AzureLocation:
    """Where an Azure storage URL points: the container, the prefix in it, and for an abfs URL the
    account and the cloud's endpoint suffix (``core.windows.net``, ``core.chinacloudapi.cn``)."""

    container: str
    prefix: str
    account: str | None = None
    endpoint_suffix: str | None = None


def azure_location(url: str) -> AzureLocation:
    """The parts of ``az://container/prefix`` or ``abfs[s]://container@account.dfs.SUFFIX/prefix``;
    ValueError saying what is wrong (the URL holds no secret: credentials are keys of their own)."""
    parsed = urlparse(url)
    prefix = parsed.path.strip("/")
    if parsed.query or parsed.fragment:
        raise ValueError(
            f"{url}: an Azure storage URL takes no ?query or #fragment (write storage.azure keys)"
        )
    if parsed.scheme == "az":
        container, account, suffix = parsed.netloc, None, None
        if "@" in container:
            raise ValueError(
                f"{url}: expected az://container/prefix (an account goes in storage.azure.account_name)"
            )
    else:
        container, _, host = parsed.netloc.rpartition("@")
        match = _ABFS_HOST.match(host)
        if not container or match is None:
            raise ValueError(
                f"{url}: expected {parsed.scheme}://container@account.dfs.core.windows.net/prefix"
            )
        account, suffix = match.group("account"), match.group("suffix")
    if not _CONTAINER_NAME.match(container):
        raise ValueError(
            f"{url}: {container!r} is not an Azure container name (3-63 lowercase letters, digits and "
            "single hyphens, a letter or digit at each end)"
        )
    return AzureLocation(container, prefix, account, suffix)


class AzureStorageSettings(StrictModel):
    """``storage.azure``: the account and credentials of an Azure Blob Storage URL (``az://``, ``abfs://``).

    At most one of ``connection_string``, ``account_key`` and ``sas_token``; none: azure-identity's
    ``DefaultAzureCredential`` (environment, workload identity, managed identity, Azure CLI).
    """

    account_name: str | None = Field(
        default=None,
        description=(
            "The storage account (`az://` URLs need it, or `endpoint`, or `connection_string`); an "
            "`abfs://container@ACCOUNT.dfs.core.windows.net` URL names it itself."
        ),
    )
    endpoint: str | None = Field(
        default=None,
        description=(
            "The blob service endpoint, for Azurite (`http://127.0.0.1:10000/devstoreaccount1`) or a "
            "sovereign cloud (`https://ACCOUNT.blob.core.chinacloudapi.cn`); unset: "
            "`https://ACCOUNT.blob.core.windows.net`."
        ),
    )
    connection_string: SecretStr | None = Field(
        default=None,
        description="A storage account connection string (it names the account and endpoint). A secret.",
    )
    account_key: SecretStr | None = Field(
        default=None, description="The storage account's access key (base64). A secret, never printed."
    )
    sas_token: SecretStr | None = Field(
        default=None,
        description="A shared access signature (`sv=...&sig=...`) to read, write, list and delete. A secret.",
    )
    access_tier: AzureAccessTier | None = Field(
        default=None,
        description=(
            "Access tier of the segment blobs (the record data); manifests, leases and keyrings keep "
            "the account's default tier, since they are small, read by every list, status and restore, "
            "and Cool and Cold bill a minimum duration and a fee per read. `Archive` is refused: an "
            "archived blob cannot be read until it is rehydrated (hours); move old segments there with "
            "a lifecycle management rule instead. Unset: the account's default tier."
        ),
    )
    encryption_scope: str | None = Field(
        default=None,
        description=(
            "Encryption scope of every blob written (a scope defined on the storage account, for a "
            "customer-managed key); a name, not a secret. Unset: the "
            "container's default scope, else the account's encryption."
        ),
    )

    @field_validator("account_name")
    @classmethod
    def _check_account(cls, account: str | None) -> str | None:
        if account is not None and not _ACCOUNT_NAME.match(account):
            raise ValueError("is not a storage account name (3-24 lowercase letters and digits)")
        return account

    @field_validator("endpoint")
    @classmethod
    def _check_endpoint(cls, endpoint: str | None) -> str | None:
        return None if endpoint is None else checked_endpoint(endpoint)

    @field_validator("access_tier", mode="before")
    @classmethod
    def _check_access_tier(cls, value: Any) -> Any:
        return _readable_class(value, AzureAccessTier, {"Archive": _AZURE_ARCHIVE}, "Azure")

    @field_validator("encryption_scope")
    @classmethod
    def _check_encryption_scope(cls, scope: str | None) -> str | None:
        return _name_matching(
            scope,
            _AZURE_ENCRYPTION_SCOPE,
            "an encryption scope name (3 to 63 letters, digits and dashes, each dash between two "
            "letters or digits)",
        )

    @model_validator(mode="after")
    def _one_credential(self) -> AzureStorageSettings:
        given = [name for name in _AZURE_CREDENTIAL_KEYS if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"{_and(given)} are each a credential: keep one")
        if self.connection_string is not None:
            beside = [name for name in ("account_name", "endpoint") if getattr(self, name) is not None]
            if beside:
                raise ValueError(
                    f"the connection string names the account and endpoint: remove {_and(beside)}"
                )
        return self


#: The keys of ``storage.azure`` that are credentials; none set: DefaultAzureCredential.
_AZURE_CREDENTIAL_KEYS = ("connection_string", "account_key", "sas_token")


class StorageSettings(StrictModel):
    """Where backups live: a local folder (the default), an S3-compatible bucket, a Google Cloud
    Storage bucket or an Azure container.

    ``url`` picks the backend (``/path``, ``file:///path``, ``s3://bucket/prefix`` or
    ``gs://bucket/prefix``, with its keys in ``gcs``).
    The seed tool's ``backend`` + ``path`` / ``bucket`` + ``prefix`` keys are
    accepted as well and turned into a URL, but not beside ``url``. The S3 keys
    (``bucket``, ``prefix``, ``sse``, ``sse_kms_key_id``, ``storage_class``; ``endpoint_url``,
    ``region`` and the credentials unless ``encryption.kms_key_id`` reads them) are refused on a
    folder.
    """

    url: str | None = Field(
        default=None,
        description=(
            "Where backups live: a folder (`./kafka-backups`, `file:///data/backups`), "
            "`s3://bucket/prefix`, `gs://bucket/prefix` (Google Cloud Storage, settings in `gcs`), or "
            "Azure's `az://container/prefix` (also `abfs://container@account.dfs.core.windows.net/prefix`; "
            "account and credentials in `storage.azure`). "
            "Unset: built from the keys below, else `./kafka-backups` (refused when S3 keys are set: "
            "they need a bucket). A relative "
            "folder is relative to the config file's folder (to the current folder with `--path`). An "
            "S3 URL may end in `?region=R&endpoint=http://host:port` (the OSO kafka-backup spelling of "
            "`region` and `endpoint_url`); no other query, and no user name or password."
        ),
    )
    backend: StorageBackend | None = Field(
        default=None, description="Seed-tool form: `filesystem` (with `path`) or `s3` (with `bucket`)."
    )
    path: str | None = Field(default=None, description="Seed-tool form: the folder of a filesystem backend.")
    bucket: str | None = Field(default=None, description="Seed-tool form: the S3 bucket.")
    prefix: str | None = Field(default=None, description="Seed-tool form: the key prefix inside the bucket.")
    endpoint_url: str | None = Field(
        default=None,
        alias="endpoint_url",
        description="S3 endpoint for MinIO, moto or another S3-compatible service; unset: AWS.",
    )
    region: str | None = Field(default=None, description="S3 region; unset: the AWS default chain's region.")
    access_key_id: SecretStr | None = Field(
        default=None, description="S3 access key; unset: the AWS default credential chain. A secret."
    )
    secret_access_key: SecretStr | None = Field(
        default=None, description="S3 secret key (with `access_key_id`). A secret, never printed."
    )
    session_token: SecretStr | None = Field(
        default=None, description="S3 session token of temporary credentials. A secret."
    )
    sse: Literal["AES256", "aws:kms"] | None = Field(
        default=None,
        description=(
            "Server-side encryption of every object written: `AES256` (SSE-S3) or `aws:kms` (SSE-KMS)."
        ),
    )
    sse_kms_key_id: str | None = Field(
        default=None,
        description="KMS key id or ARN with `sse: aws:kms`; unset: the bucket's AWS-managed key.",
    )
    storage_class: S3StorageClass | None = Field(
        default=None,
        description=(
            "S3 storage class of the segment objects (the record data); manifests, leases and keyrings "
            "stay `STANDARD`, since they are small, read by every list, status and restore, and the "
            "infrequent-access classes bill a minimum size (128 KiB) and duration. `GLACIER` and "
            "`DEEP_ARCHIVE` are refused: their objects cannot be read until restored (hours); move "
            "old segments there with a lifecycle rule instead. Unset: `STANDARD`."
        ),
    )
    azure: AzureStorageSettings | None = Field(
        default=None,
        description="Azure Blob Storage account and credentials, for an `az://` or `abfs://` url.",
    )
    gcs: GcsStorageSettings | None = Field(
        default=None, description="Google Cloud Storage settings of a `gs://bucket/prefix` url."
    )
    encryption: EncryptionSettings | None = Field(
        default=None,
        description=(
            "Client-side encryption: record keys, values, headers and the manifests' group offsets "
            "never reach the store in plaintext (docs/security.md). Unset: not encrypted."
        ),
    )
    max_attempts: int = Field(
        default=8,
        ge=1,
        le=50,
        description=(
            "Tries of an S3 or Cloud Storage request made however short retry_timeout_secs is, the "
            "waits between them doubling from 0.05 s (8 tries: 6.35 s); after them a failing request "
            "is tried again while retry_timeout_secs lasts, waiting 0.5 s doubling up to 10 s. "
            "Unset: 8 for backup, restore, three-phase-restore, `prune --execute`, `rekey --execute` and "
            "`validate --deep`, 3 for the commands run by hand (`list`, `describe`, `status`, `validate`, "
            "a plan of `prune` or `rekey`, `parquet-key`)."
        ),
    )
    # After max_attempts' quick tries, with exponential backoff from 0.5 s to 10 s (kbackup.core.retry,
    # the one retry layer: botocore tries once), this lets a run ride out an endpoint restart.
    retry_timeout_secs: float = Field(
        default=120,
        ge=0,
        le=3600,
        description=(
            "How long a failing S3 or Cloud Storage request (connection refused or reset, 5xx, "
            "throttling) is tried again before the run fails with a storage error; 0 turns it off. "
            "Unset: 120 for the commands that run unattended (as for max_attempts), 3 for the "
            "commands run by hand, so a store that refuses connections fails `list` or `status` in seconds."
        ),
    )

    model_config = ConfigDict(extra="forbid", validate_default=True, populate_by_name=True)

    #: Set by :meth:`for_interactive_command` when it shortened the retries the file left unset.
    _patience_shortened: bool = PrivateAttr(default=False)

    def for_interactive_command(self) -> StorageSettings:
        """These settings for a command a person waits on (``list``, ``describe``, ``status``).

        A run rides out an endpoint restart for ``retry_timeout_secs`` (120 s unless set); a
        command run by hand against a store that refuses its connections should say so in
        seconds. Only what the file leaves unset is shortened: a ``max_attempts`` or
        ``retry_timeout_secs`` written in it is kept.
        """
        updates: dict[str, Any] = {}
        if "max_attempts" not in self.model_fields_set and self.max_attempts > INTERACTIVE_MAX_ATTEMPTS:
            updates["max_attempts"] = INTERACTIVE_MAX_ATTEMPTS
        if (
            "retry_timeout_secs" not in self.model_fields_set
            and self.retry_timeout_secs > INTERACTIVE_RETRY_TIMEOUT_SECS
        ):
            updates["retry_timeout_secs"] = INTERACTIVE_RETRY_TIMEOUT_SECS
        if not updates:
            return self
        # model_copy counts updated fields as set; a second call then keeps them as they are.
        shortened = self.model_copy(update=updates)
        shortened._patience_shortened = True
        return shortened

    @property
    def patience_shortened(self) -> bool:
        """True when :meth:`for_interactive_command` shortened the retries: a give-up says so."""
        return self._patience_shortened

    def resolved_url(self) -> str:
        """The storage URL, built from ``backend``/``path``/``bucket``/``prefix`` when ``url`` is not set."""
        if self.url:
            return self.url
        if self.bucket:  # a bucket is S3's (backend s3 has one, backend filesystem none: _one_location)
            prefix = (self.prefix or "").strip("/")
            return f"s3://{self.bucket}/{prefix}" if prefix else f"s3://{self.bucket}"
        self._refuse_s3_keys_without_a_bucket()
        return self.path or DEFAULT_STORAGE_PATH

    def s3_keys_without_a_bucket(self) -> list[str]:
        """The S3 settings of a store that names no location at all (the default folder)."""
        if self.url is not None or self.bucket is not None or self.path is not None or self.backend:
            return []
        return [name for name in self.s3_only_keys() if getattr(self, name) is not None]

    def _refuse_s3_keys_without_a_bucket(self) -> None:
        # S3 settings and no location: the backups would silently go to the default folder. Refused
        # here, when the location is resolved, not when the file is read: a file may hold only the
        # S3 settings and each command name the bucket with --path s3://bucket/prefix.
        unplaced = self.s3_keys_without_a_bucket()
        if unplaced:
            one = len(unplaced) == 1
            raise ConfigError(
                f"storage: {_and(unplaced)} {'is' if one else 'are'} for an S3 store, and no bucket is "
                f"given: backups would go to the folder {DEFAULT_STORAGE_PATH}",
                hint="write storage.url: s3://bucket/prefix, or pass --path s3://bucket/prefix",
            )

    @field_validator("endpoint_url")
    @classmethod
    def _check_endpoint(cls, endpoint: str | None) -> str | None:
        # botocore would take 'minio:9000' as an invalid endpoint only on the first request, or
        # 'htp://minio:9000' as one it cannot resolve; both are typos, found here before any call.
        return None if endpoint is None else checked_endpoint(endpoint)

    @field_validator("storage_class", mode="before")
    @classmethod
    def _check_storage_class(cls, value: Any, info: ValidationInfo) -> Any:
        # storage_class sits beside sse, as S3's keys do: written so for another cloud, the line
        # names that cloud's key (its values are not S3's, so "must be STANDARD, ..." would mislead).
        url = str(info.data.get("url") or "")
        elsewhere = _OTHER_CLOUDS_CLASS.get(urlparse(url).scheme)
        if value is not None and elsewhere is not None:
            raise ValueError(f"is S3's storage class, and the url is {elsewhere[0]}'s: write {elsewhere[1]}")
        return _readable_class(
            value, S3StorageClass, {"GLACIER": _S3_ARCHIVE, "DEEP_ARCHIVE": _S3_ARCHIVE}, "S3"
        )

    @field_validator("bucket")
    @classmethod
    def _check_bucket(cls, bucket: str | None) -> str | None:
        if bucket is not None and not _BUCKET_NAME.match(bucket):
            # Not echoed: a bucket written as user:password@bucket would show its password.
            raise ValueError(f"is not a bucket name ({_BUCKET_CHARACTERS})")
        return bucket

    @field_validator("url")
    @classmethod
    def _check_scheme(cls, url: str | None) -> str | None:
        if url is None:
            return url
        parsed = urlparse(url)
        scheme = parsed.scheme
        if scheme in AZURE_SCHEMES:
            azure_location(url)
            return url
        if scheme not in ("", "file", *CLOUD_SCHEMES) and not re.match(r"^[A-Za-z]:[\\/]", url):
            raise ValueError(
                f"expected a folder path, file://, s3://, gs://, az:// or abfs:// URL, got scheme {scheme!r}"
            )
        # A mistyped URL must not quietly become a folder: 's3//bucket/prod' would back up to
        # ./s3/bucket/prod on local disk and exit 0.
        mistyped = _MISTYPED_SCHEME.match(url) if not scheme else None
        shown = printable_url(url)
        if mistyped:
            name, rest = mistyped.group("name"), url[mistyped.end() :]
            # A file: URL always holds an absolute path (file:///srv), whatever was lost with the colon.
            meant = f"file:///{rest.lstrip('/')}" if name.lower() == "file" else f"{name}://{rest}"
            raise ValueError(
                f"{shown!r} looks like {printable_url(meant)} with the colon missing "
                f"(a folder really named so: ./{shown})"
            )
        if scheme in ("s3", "gs", "file") and "@" in parsed.netloc:
            # boto3 would take 'user:password@bucket' for a bucket name and print it in its error.
            raise ValueError(
                f"{shown}: a storage URL cannot hold a user name or password; set "
                "storage.access_key_id and storage.secret_access_key (write ${ENV_VAR}), or leave "
                "them to the AWS credential chain"
            )
        if scheme in CLOUD_SCHEMES and not parsed.netloc:
            raise ValueError(f"{shown!r}: expected {scheme}://bucket[/prefix]")
        if scheme == "gs" and not _GCS_BUCKET_NAME.match(parsed.netloc):
            raise ValueError(
                f"{shown}: {parsed.netloc!r} is not a Cloud Storage bucket name ({_GCS_BUCKET_CHARACTERS})"
            )
        if scheme == "gs" and parsed.query:
            raise ValueError(f"{shown}: a gs:// URL takes no ?query; write the keys of storage.gcs")
        if scheme == "s3" and not _BUCKET_NAME.match(parsed.netloc):
            # Found here, not as botocore's "Invalid bucket name" and its regexes on the first request.
            raise ValueError(f"{shown}: {parsed.netloc!r} is not a bucket name ({_BUCKET_CHARACTERS})")
        if scheme and parsed.fragment:
            raise ValueError(f"{shown}: a storage URL has no #fragment")
        if scheme == "file" and parsed.query:
            raise ValueError(f"{shown}: a file:// URL takes no ?query")
        if scheme == "s3" and parsed.query:
            endpoint = url_query_settings(url).get("endpoint_url")
            if endpoint is not None:
                checked_endpoint(endpoint)
        if scheme == "file" and parsed.netloc not in ("", "localhost"):
            # file://relative/x is the folder /x on the host 'relative', never ./relative/x.
            raise ValueError(
                f"{url!r} names the host {parsed.netloc!r} and the folder {parsed.path or '/'}: a file:// "
                f"URL holds an absolute path (file:///data/backups); for a relative folder write "
                f"{parsed.netloc}{parsed.path} (in a config file relative to the file's folder, "
                "on the command line to the current folder)"
            )
        if scheme == "file" and not parsed.path.startswith("/"):
            raise ValueError(f"{url!r}: a file: URL holds an absolute path, e.g. file:///data/backups")
        return url

    @model_validator(mode="after")
    def _url_query_into_keys(self) -> StorageSettings:
        # OSO kafka-backup users write s3://bucket/prefix?region=R&endpoint=URL: taken as the keys
        # they name, never dropped (a dropped endpoint sent every request to AWS instead).
        if self.url is None:
            return self
        parsed = urlparse(self.url)
        if parsed.scheme != "s3" or not parsed.query:
            return self
        for name, (written, value) in _url_query_pairs(self.url).items():
            current = getattr(self, name)
            if current is not None and current != value:
                raise ValueError(f"url sets {written}={value} and {name} is {current}: give it in one place")
            setattr(self, name, value)
        self.url = urlunparse(parsed._replace(query=""))
        return self

    @model_validator(mode="after")
    def _one_location(self) -> StorageSettings:
        # Keys that say where backups are, or that only an S3 store reads, are refused where they
        # would be ignored: url beside the seed tool's keys, a bucket-less s3 backend, S3 settings
        # on a folder. Each was dropped silently before, and backups went somewhere else.
        given = [name for name in _SEED_LOCATION_KEYS if getattr(self, name) is not None]
        if self.url is not None and given:
            raise ValueError(
                f"{_and(['url', *given])} each say where backups are: keep url alone, or remove it "
                f"and keep {_and(given)}"
            )
        if self.backend == "s3" and not self.bucket:
            raise ValueError(
                "backend s3 needs a bucket: set bucket (and prefix), or write url: s3://bucket/prefix"
            )
        if self.backend == "s3" and self.path is not None:
            raise ValueError(
                "path is the folder of backend filesystem; an s3 backend takes bucket and prefix"
            )
        self._check_azure_keys()
        self._check_gcs_keys()
        folder = self.explicit_folder()
        if folder is not None:
            unread = [name for name in self.s3_only_keys() if getattr(self, name) is not None]
            if unread:
                one = len(unread) == 1
                raise ValueError(
                    f"{_and(unread)} {'is' if one else 'are'} for an S3 store, and {folder} is a folder: "
                    f"remove {'it' if one else 'them'}, or write url: s3://bucket/prefix"
                )
        return self

    def _check_azure_keys(self) -> None:
        """An Azure URL takes storage.azure and no S3 key; any other store takes no storage.azure."""
        on_azure = self.url is not None and urlparse(self.url).scheme in AZURE_SCHEMES
        if not on_azure:
            if self.azure is not None:
                raise ValueError(
                    f"azure is for an az:// or abfs:// url, and the store is {self.resolved_url()}: "
                    "remove it, or write url: az://container/prefix"
                )
            return
        assert self.url is not None
        unread = [name for name in self.s3_only_keys() if getattr(self, name) is not None]
        if unread:
            one = len(unread) == 1
            raise ValueError(
                f"{_and(unread)} {'is' if one else 'are'} for an S3 store, and the url is Azure's: remove "
                f"{'it' if one else 'them'} (the account and credentials go in storage.azure)"
            )
        location = azure_location(self.url)
        azure = self.azure or AzureStorageSettings()
        if location.account and azure.account_name and location.account != azure.account_name:
            raise ValueError(
                f"the url names the account {location.account} and azure.account_name is "
                f"{azure.account_name}: give it in one place"
            )
        account = location.account or azure.account_name
        if account is None and azure.endpoint is None and azure.connection_string is None:
            raise ValueError(
                "an az:// url needs the storage account: set azure.account_name (or azure.endpoint, or "
                "azure.connection_string), or write abfs://container@ACCOUNT.dfs.core.windows.net/prefix"
            )
        if azure.account_key is not None and account is None:
            raise ValueError("azure.account_key needs the account it belongs to: set azure.account_name")

    def _check_gcs_keys(self) -> None:
        # A gs:// store reads none of the S3 keys, and only a gs:// store reads storage.gcs: each
        # refused where it would be ignored, as S3's keys are on a folder.
        on_gcs = self.url is not None and urlparse(self.url).scheme == "gs"
        if on_gcs:
            unread = [name for name in self.s3_only_keys() if getattr(self, name) is not None]
            if unread:
                one = len(unread) == 1
                raise ValueError(
                    f"{_and(unread)} {'is' if one else 'are'} for an S3 store, and url "
                    f"{printable_url(self.url or '')} is Google Cloud Storage: remove "
                    f"{'it' if one else 'them'} (its keys go under storage.gcs)"
                )
        elif self.gcs is not None:
            raise ValueError(
                f"gcs is for a gs://bucket/prefix url, and {self.where()} is not one: remove gcs, "
                "or write url: gs://bucket/prefix"
            )

    def where(self) -> str:
        """Where the file says backups are, in words safe to print."""
        if self.url is not None:
            return f"url {printable_url(self.url)}"
        if self.bucket is not None:
            return f"bucket {self.bucket}"
        return f"path {self.path}" if self.path is not None else f"the default folder {DEFAULT_STORAGE_PATH}"

    def explicit_folder(self) -> str | None:
        """How the file says the store is a folder (``url /data``, ``backend filesystem``), if it does."""
        if self.url is not None:
            remote = urlparse(self.url).scheme in (*CLOUD_SCHEMES, *AZURE_SCHEMES)
            return None if remote else f"url {printable_url(self.url)}"
        if self.backend == "filesystem":
            return "backend filesystem"
        if self.backend is None and self.bucket is None and self.path is not None:
            return f"path {self.path}"
        return None

    def s3_only_keys(self) -> tuple[str, ...]:
        """The keys only an S3 store reads; a KMS key-encryption key reads the endpoint, region and
        credentials too (``storage.encryption.kms_key_id``), so they are not S3's alone then."""
        if self.encryption is not None and self.encryption.kms_key_id:
            return _S3_STORE_KEYS
        return _S3_STORE_KEYS + _S3_AND_KMS_KEYS


#: The embedded default: a folder beside the config file, or beside where the command runs without one.
DEFAULT_STORAGE_PATH = "./kafka-backups"

#: What a command a person waits on tries against an unreachable store (unless the file says):
#: the tries of one request at least, and the seconds the retries may go on for; a refused
#: connection then fails the command in a few seconds, not the two minutes a backup waits.
INTERACTIVE_MAX_ATTEMPTS = 3
INTERACTIVE_RETRY_TIMEOUT_SECS = 3.0

#: What botocore takes for a bucket name (S3 itself is stricter; its answer names the bucket).
_BUCKET_NAME = re.compile(r"^[A-Za-z0-9._-]{1,255}$")
_BUCKET_CHARACTERS = (
    "letters, digits, '.', '-' and '_'; an endpoint's host and port go in storage.endpoint_url"
)

#: The URL schemes of object stores (anything else is a folder path or file://).
CLOUD_SCHEMES = ("s3", "gs")
#: Google Cloud Storage bucket names (lower case; dots only in domain-named buckets).
_GCS_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_GCS_BUCKET_CHARACTERS = (
    "3 to 222 lower-case letters, digits, '.', '-' and '_', starting and ending with a letter or digit"
)

#: The seed tool's keys of where backups are, which ``url`` replaces.
_SEED_LOCATION_KEYS = ("backend", "path", "bucket", "prefix")
#: Where the other clouds' URLs take their storage class (access tier).
_OTHER_CLOUDS_CLASS = {
    "gs": ("Google Cloud Storage", "storage.gcs.storage_class"),
    **{scheme: ("Azure", "storage.azure.access_tier") for scheme in AZURE_SCHEMES},
}
#: Storage keys only the S3 store reads.
_S3_STORE_KEYS = ("bucket", "prefix", "sse", "sse_kms_key_id", "storage_class")
#: Storage keys the S3 store reads, and a KMS key-encryption key as well.
_S3_AND_KMS_KEYS = ("endpoint_url", "region", "access_key_id", "secret_access_key", "session_token")


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


#: The query parameters an S3 storage URL may carry, and the storage key each one sets.
_URL_QUERY_KEYS = {"region": "region", "endpoint": "endpoint_url", "endpoint_url": "endpoint_url"}


def _url_query_pairs(url: str) -> dict[str, tuple[str, str]]:
    """The storage keys an S3 URL's query sets: key -> (the parameter as written, its value).

    Anything else in the query is refused, naming the storage key to write instead; no value of
    the query is echoed (a pasted ``?secret_access_key=...`` must not reach the terminal).
    """
    shown = printable_url(url)
    pairs = parse_qsl(urlparse(url).query, keep_blank_values=True)
    unknown = [key for key, _ in pairs if key not in _URL_QUERY_KEYS]
    if unknown:
        instead = [
            f"storage.{key}" if key in StorageSettings.model_fields else repr(key)
            for key in dict.fromkeys(unknown)
        ]
        raise ValueError(
            f"{shown}: a storage URL's query may set only region and endpoint; write "
            f"{', '.join(instead)} as key(s) of the storage section instead"
        )
    found: dict[str, tuple[str, str]] = {}
    for written, value in pairs:
        name = _URL_QUERY_KEYS[written]
        if name in found:
            raise ValueError(f"{shown}: the query gives {name.removesuffix('_url')} twice")
        if not value:
            raise ValueError(f"{shown}: the query's {written}= is empty")
        found[name] = (written, value)
    return found


def url_query_settings(url: str) -> dict[str, str]:
    """The storage keys (``region``, ``endpoint_url``) the query of an S3 storage URL sets."""
    if urlparse(url).scheme != "s3":
        return {}
    return {name: value for name, (_, value) in _url_query_pairs(url).items()}


def checked_endpoint(endpoint: str) -> str:
    """An S3 or KMS endpoint URL, or ValueError saying what is wrong with it (never its credentials)."""
    # botocore would take 'minio:9000' as an invalid endpoint only on the first request, or
    # 'htp://minio:9000' as one it cannot resolve; both are typos, found here before any call.
    parsed = urlparse(endpoint)
    shown = printable_url(endpoint)
    if parsed.username is not None or parsed.password is not None or has_url_userinfo(endpoint):
        raise ValueError(
            f"{shown}: an endpoint URL cannot hold a user name or password; set "
            "storage.access_key_id and storage.secret_access_key (write ${ENV_VAR})"
        )
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"expected http(s)://host[:port], got {shown!r}")
    try:
        parsed.port  # noqa: B018 (raises ValueError for a port that is not a number from 0 to 65535)
    except ValueError:
        raise ValueError(f"{shown!r}: the port is not a number from 0 to 65535") from None
    return endpoint


#: A storage URL whose scheme lost its colon (``s3//bucket``, ``file//data``): a relative path that
#: begins with a scheme-like name and ``//``, which no one writes on purpose as a folder name.
_MISTYPED_SCHEME = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9+.-]*)//")

_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _substitute_env(value: Any, location: tuple[str | int, ...], source: str) -> Any:
    """Replace ``${NAME}`` and ``${NAME:-default}`` in every string of a parsed YAML tree.

    Substitution happens after parsing, so a secret's value is never
    re-interpreted as YAML. ``$${`` escapes a literal ``${``.
    """
    if isinstance(value, dict):
        for key in value:
            _check_encodable(key, (*location, str(key)), source)
        return {key: _substitute_env(item, (*location, str(key)), source) for key, item in value.items()}
    if isinstance(value, list):
        return [_substitute_env(item, (*location, index), source) for index, item in enumerate(value)]
    _check_encodable(value, location, source)
    if not isinstance(value, str) or "${" not in value:
        return value

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        found = os.environ.get(name)
        if found is None:
            if default is not None:
                return default
            raise ConfigError(
                f"{source}: {_dotted(location)}: environment variable {name} is not set",
                hint=f"export {name}=... before running, or write ${{{name}:-default}} in the file",
            )
        if location and is_secret_key(str(location[-1])):
            register_secret(found)
        return found

    escaped = value.replace("$${", "\0")
    return _ENV_REFERENCE.sub(replace, escaped).replace("\0", "${")


def _check_encodable(value: Any, location: tuple[str | int, ...], source: str) -> None:
    """Refuse strings that are not text: YAML's ``"\\ud800"`` escape yields a lone surrogate,
    which no Kafka client, file or object key can hold."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            where = _dotted(location[:-1]) if location and location[-1] == value else _dotted(location)
            raise ConfigError(
                f"{source}: {where}: contains a lone surrogate escape (\\ud800-\\udfff), not text"
            ) from None


def _dotted(location: tuple[str | int, ...]) -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


Model = TypeVar("Model", bound=BaseModel)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error, not 'last one wins'
    (a pasted second ``bootstrap_servers:`` would otherwise silently replace the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:
                continue  # an unhashable key: the base class reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found the key {key!r} twice",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_text_file(path: str | Path, what: str, *, missing_hint: str | None = None) -> str:
    """A text file a user hands in (UTF-8, a byte order mark allowed); every way it cannot be read
    is a ConfigError naming ``what`` and the file."""
    source = str(path)
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"{what} {source} not found", hint=missing_hint) from None
    except OSError as exc:
        raise ConfigError(f"{what} {source} cannot be read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} {source} is not UTF-8 text (byte {exc.start} cannot be decoded)",
            hint="save the file as UTF-8",
        ) from None
    except ValueError as exc:  # a NUL in the name
        raise ConfigError(f"{what} {source} cannot be read: {exc}") from None


def read_yaml_file(path: str | Path) -> dict[str, Any]:
    """Parse a YAML config file into a mapping, with env references substituted."""
    source = str(path)
    text = read_text_file(path, "config file", missing_hint="check the path given to --config")
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"{source}{where}: could not parse YAML: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{source}: could not parse YAML: nested too deeply") from None
    except (ValueError, OverflowError) as exc:
        # A value YAML's own types cannot convert: '!!int x', a date like 2026-02-30, a number of
        # more digits than int() converts.
        # Without the value itself ("invalid literal for int() with base 10: 'x'"): a tagged
        # password would be echoed.
        problem = str(exc).split(";")[0].split(": '")[0].split(': "')[0]
        raise ConfigError(f"{source}: could not parse YAML: a value cannot be converted: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level, got {type(data).__name__}")
    result: dict[str, Any] = _substitute_env(data, (), source)
    return result


def validate_config(
    data: dict[str, Any], model: type[Model], source: str, *, flags: Mapping[str, str] | None = None
) -> Model:
    """Validate a mapping against a model; every problem names ``source`` and the key.

    ``flags``: keys (dotted, as in the model) that came from command-line options, each with the
    option as the user typed it (``--time-window-end 2026-11-20``); a problem with one of them
    names the option instead of the key.
    """
    _register_input_secrets(data, model)
    try:
        validated = model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, model, source, flags=flags)) from None
    register_model_secrets(validated)
    return validated


def load_config(path: str | Path, model: type[Model]) -> Model:
    """Read, substitute and validate a YAML config file."""
    return validate_config(read_yaml_file(path), model, str(path))


def register_model_secrets(model: BaseModel) -> None:
    """Register every ``SecretStr`` value in a model tree with the redactor."""
    for value in model.__dict__.values():
        _register_value(value)


def _register_value(value: Any) -> None:
    if isinstance(value, SecretStr):
        register_secret(value.get_secret_value())
    elif isinstance(value, BaseModel):
        register_model_secrets(value)
    elif isinstance(value, dict):
        for item in value.values():
            _register_value(item)
    elif isinstance(value, list):
        for item in value:
            _register_value(item)


#: Maps of client properties (librdkafka's, Spark's, the Java client's): any entry may hold a secret
#: whatever its name (``sasl.jaas.config``, ``spark.hadoop.fs.s3a.secret.key``), so no value in
#: them is ever echoed.
PROPERTY_MAPS = frozenset({"properties", "producer_properties", "spark_conf", "kafka_options"})
#: Credentials not held as ``SecretStr``, and ``key_env``, where the key itself is pasted by
#: mistake for its variable's name: their values are never echoed either.
_CREDENTIAL_KEYS = frozenset({"sasl_username", "key_env"})
#: Keys whose value is a URL, a server or a bucket, which may carry a user name and password
#: (``user:pw@``).
_URL_KEYS = frozenset(
    {"url", "endpoint_url", "kms_endpoint_url", "spark_master", "bootstrap_servers", "bucket"}
)

#: How much of a value may be shown: all of it, all but a URL's credentials, or only its type.
Secrecy = Literal["plain", "url", "secret"]
_SECRECY_RANK: dict[str, int] = {"plain": 0, "url": 1, "secret": 2}

#: What each pydantic type error expected, in the user's words; alternatives of a union's members
#: are joined ("must be true, false or auto").
_EXPECTED: dict[str, tuple[str, ...]] = {
    "string_type": ("a string",),
    "bool_type": ("true", "false"),
    "bool_parsing": ("true", "false"),
    "int_type": ("a whole number",),
    "int_parsing": ("a whole number",),
    "int_from_float": ("a whole number",),
    "float_type": ("a number",),
    "float_parsing": ("a number",),
    "list_type": ("a list",),
    "tuple_type": ("a list",),
    "set_type": ("a list",),
    "dict_type": ("a mapping",),
    "model_type": ("a mapping of settings",),
    "model_attributes_type": ("a mapping of settings",),
    "none_required": ("null",),
    "datetime_type": ("a date and time (ISO 8601)",),
    "datetime_parsing": ("a date and time (ISO 8601)",),
    "datetime_from_date_parsing": ("a date and time (ISO 8601)",),
}


@dataclass(frozen=True)
class _Where:
    """Where a pydantic error points, as the user wrote the file."""

    #: The keys and list positions, without pydantic's names of union members (``.bool``).
    path: tuple[str | int, ...]
    secrecy: Secrecy
    #: The key holds a section of settings: its value is never echoed (it is a whole section).
    section: bool
    #: The error is about a mapping's key (pydantic's ``[key]``), not its value.
    about_key: bool
    #: The paths at which a union's member was tried (to keep only the member the value fits best).
    union_points: tuple[tuple[str | int, ...], ...] = ()


@dataclass
class _Problem:
    where: _Where
    error: Any


def format_validation_error(
    exc: ValidationError, model: type[BaseModel], source: str, *, flags: Mapping[str, str] | None = None
) -> str:
    """One line per problem: ``FILE: KEY: what was wrong (got ...)``, in the user's words.

    The input value is echoed only for keys that cannot hold a secret: never for a credential,
    a property map's entry, a whole section or a container; a URL's credentials never. Union
    members pydantic tried (``restore.repartition.bool``) are one problem at the user's key.
    """
    problems = [
        _Problem(_locate(model, tuple(error["loc"])), error) for error in exc.errors(include_url=False)
    ]
    problems = _without_redundant(problems, model)
    groups: dict[tuple[tuple[str | int, ...], bool], list[_Problem]] = {}
    for problem in problems:
        groups.setdefault((problem.where.path, problem.where.about_key), []).append(problem)
    lines = [_line(group, model, source, flags or {}) for group in groups.values()]
    head = lines[0]
    if len(lines) > 1:
        head += f"  [and {len(lines) - 1} more problem(s)]\n  " + "\n  ".join(lines[1:])
    return head


def _without_redundant(problems: list[_Problem], model: type[BaseModel]) -> list[_Problem]:
    """Drop what says the same mistake twice: a required key reported missing next to the unknown
    key that is its typo, and the union members a value did not even start to fit."""
    typo_of = set()
    for problem in problems:
        if problem.error["type"] == "extra_forbidden":
            suggestion = _closest_key(model, problem.where.path)
            if suggestion:
                typo_of.add((*problem.where.path[:-1], suggestion))
    # A member that got further into the value (a list whose second item is wrong) tells more
    # than the members whose type did not match at all.
    deeper = {
        point
        for problem in problems
        for point in problem.where.union_points
        if len(problem.where.path) > len(point)
    }
    return [
        problem
        for problem in problems
        if not (problem.error["type"] == "missing" and problem.where.path in typo_of)
        and not any(problem.where.path == point for point in problem.where.union_points if point in deeper)
    ]


def _line(group: list[_Problem], model: type[BaseModel], source: str, flags: Mapping[str, str]) -> str:
    where = group[0].where
    message = _message(group, model)
    if where.about_key:
        message = f"the key {message}"
    key = _dotted(where.path)
    for flagged in sorted(flags, key=len, reverse=True):
        if key == flagged or key.startswith((f"{flagged}.", f"{flagged}[")):
            return f"{flags[flagged]}: {message}"
    if not where.path and flags:
        # A check across keys ("time_window_end (...) must be after time_window_start (...)"):
        # each key an option set is named as the option was typed.
        named = message
        for flagged, option in flags.items():
            # The option replaces the key and the value pydantic converted ("(1795305600000)").
            pattern = rf"\b{re.escape(flagged)}\b(?: \([^)]*\))?"
            named = re.sub(pattern, option.replace("\\", "\\\\"), named)
        if named != message:
            return named
        return f"{source}: {message}"
    return f"{source}: {key}: {message}"


def _message(group: list[_Problem], model: type[BaseModel]) -> str:
    first = group[0]
    where, error = first.where, first.error
    kind = error["type"]
    if kind == "extra_forbidden":
        suggestion = _closest_key(model, where.path)
        return "unknown key" + (f" (did you mean {suggestion!r}?)" if suggestion else "")
    if kind == "missing":
        return "required key is missing"
    echo = where.secrecy == "plain" and not where.section
    has_input = "input" in error
    value = error.get("input")
    sentences = [problem for problem in group if not _is_type_error(problem.error)]
    if not sentences:
        alternatives: list[str] = []
        for problem in group:
            alternatives += [item for item in _expected(problem.error) if item not in alternatives]
        message = f"must be {_either(alternatives)}"
        return message + (f" (got {_found(value, echo=echo)})" if has_input else "")
    error = sentences[0].error
    message = _sentence(error)
    if where.secrecy != "plain":
        message = _masked(message, error.get("input"), where.secrecy)
    elif has_input and isinstance(value, str | int | float) and not isinstance(value, bool):
        shown = repr(value)
        if len(shown) <= 60 and not _mentions(message, shown) and not _mentions(message, str(value)):
            message += f" (got {shown})"
    return message


def _mentions(message: str, text: str) -> bool:
    """``text`` stands in ``message`` on its own (the 0 of "got 0", not the 0 of "above 0.5")."""
    return bool(re.search(rf"(?<![\w.]){re.escape(text)}(?![\w.])", message))


def _is_type_error(error: Any) -> bool:
    """The value is not of a type (or one of the values) the key takes, as opposed to a type that
    breaks a rule (a number out of range, a validator's refusal)."""
    return error["type"] in _EXPECTED or error["type"] == "literal_error"


def _expected(error: Any) -> tuple[str, ...]:
    kind = error["type"]
    if kind == "literal_error":
        expected = str(error.get("ctx", {}).get("expected", ""))
        return tuple(re.findall(r"'((?:[^'\\]|\\.)*)'", expected)) or (expected,)
    return _EXPECTED[kind]


def _sentence(error: Any) -> str:
    """A constraint or a validator's message as a sentence about the key ("must be at least 1")."""
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "is_instance_of" and "SecretStr" in str(ctx.get("class", "")):
        return "must be a string"
    bounds = {
        "greater_than": ("must be greater than", "gt"),
        "greater_than_equal": ("must be at least", "ge"),
        "less_than": ("must be less than", "lt"),
        "less_than_equal": ("must be at most", "le"),
    }
    if kind in bounds:
        words, name = bounds[kind]
        return f"{words} {ctx.get(name)}"
    if kind in ("too_short", "string_too_short"):
        least = ctx.get("min_length", 1)
        unit = "character(s)" if kind == "string_too_short" else "entries"
        return "must not be empty" if least == 1 else f"must have at least {least} {unit}"
    if kind in ("too_long", "string_too_long"):
        unit = "character(s)" if kind == "string_too_long" else "entries"
        return f"must have at most {ctx.get('max_length')} {unit}"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx.get('pattern')}"
    message = str(error["msg"])
    # A validator's own message is the whole sentence; pydantic's "Value error, " adds nothing.
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    for pydantic_words in ("Input should", "String should", "Value should", "List should"):
        if message.startswith(pydantic_words):
            return "must" + message[len(pydantic_words) :]
    return message


def _either(alternatives: list[str]) -> str:
    if len(alternatives) == 1:
        return alternatives[0]
    return f"{', '.join(alternatives[:-1])} or {alternatives[-1]}"


def _found(value: Any, *, echo: bool) -> str:
    """What was given instead: the value itself where it may be shown, else only its type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return ("true" if value else "false") if echo else "a boolean"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple | set):
        return "a list"
    if isinstance(value, str | int | float):
        shown = repr(value)
        if echo and len(shown) <= 60:
            return shown
        return "a string" if isinstance(value, str) else "a number"
    return f"a {type(value).__name__}"


def _masked(message: str, value: Any, secrecy: Secrecy) -> str:
    """A validator's message about a key that can hold a secret: without any part of its value
    (``secret``), or without the user name and password of any URL or server in it (``url``)."""
    for leaf in sorted(_leaves(value), key=len, reverse=True):
        if secrecy == "secret" and len(leaf) >= 3:
            message = message.replace(leaf, REDACTED)
        elif "@" in leaf:
            userinfo = leaf.rpartition("@")[0].rpartition("//")[2]
            if userinfo:
                message = message.replace(f"{userinfo}@", f"{REDACTED}@")
    return mask_url_userinfo(message)


def _leaves(value: Any) -> Iterator[str]:
    """Every string and number in a parsed YAML value, mapping keys included."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(key)
            yield from _leaves(item)
    elif isinstance(value, list | tuple | set):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str):
        yield value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)


def _members(annotation: Any) -> list[Any]:
    """The types a value of ``annotation`` may have (a union's members, ``None`` left out)."""
    if annotation is None:
        return []
    if get_origin(annotation) is Annotated:
        return _members(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [
            member for arg in get_args(annotation) for member in _members(arg) if member is not type(None)
        ]
    return [annotation]


def _member_named(members: list[Any], tag: str) -> Any:
    """The member of a union that pydantic names ``tag`` in an error's location (None: not known)."""
    for member in members:
        origin = get_origin(member)
        if origin is Literal:
            if tag.startswith("literal["):
                return member
        elif origin is not None:
            if tag == origin.__name__ or tag.startswith(f"{origin.__name__}["):
                return member
        elif isinstance(member, type) and (tag == member.__name__ or member.__name__ in tag):
            return member
    return None


def _field_named(model: type[BaseModel], name: str | int) -> Any:
    found = model.model_fields.get(str(name))
    if found is not None:
        return found
    return next((info for info in model.model_fields.values() if info.alias == name), None)


def _holds(annotation: Any, kind: type) -> bool:
    return any(member is kind or _holds_args(member, kind) for member in _members(annotation))


def _holds_args(annotation: Any, kind: type) -> bool:
    return any(_holds(arg, kind) for arg in get_args(annotation))


def _field_secrecy(name: str, annotation: Any) -> Secrecy:
    if (
        name in PROPERTY_MAPS
        or name in _CREDENTIAL_KEYS
        or is_secret_key(name)
        or _holds(annotation, SecretStr)
    ):
        return "secret"
    return "url" if name in _URL_KEYS else "plain"


def _stricter(first: Secrecy, second: Secrecy) -> Secrecy:
    return first if _SECRECY_RANK[first] >= _SECRECY_RANK[second] else second


def _locate(model: type[BaseModel], location: tuple[Any, ...]) -> _Where:
    """Walk the model along a pydantic error's location: the user's key path and what it may hold."""
    annotation: Any = model
    path: list[str | int] = []
    secrecy: Secrecy = "plain"
    union_points: list[tuple[str | int, ...]] = []
    about_key = False
    for part in location:
        if part == "[key]":
            about_key = True
            continue
        members = _members(annotation)
        if len(members) > 1:
            # pydantic names the union member it tried ('bool', "literal['auto']"): not a key.
            union_points.append(tuple(path))
            annotation = _member_named(members, str(part))
            continue
        current = members[0] if members else None
        origin = get_origin(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            info = _field_named(current, part)
            annotation = info.annotation if info is not None else None
            secrecy = _stricter(secrecy, _field_secrecy(str(part), annotation))
        elif origin is dict:
            annotation = get_args(current)[1] if get_args(current) else None
            if is_secret_key(str(part)):
                secrecy = "secret"
        elif origin in (list, tuple, set, frozenset):
            annotation = get_args(current)[0] if get_args(current) else None
        else:
            annotation = None
            if is_secret_key(str(part)):
                secrecy = "secret"
        path.append(part)
    section = any(
        isinstance(member, type) and issubclass(member, BaseModel) for member in _members(annotation)
    )
    return _Where(tuple(path), secrecy, section, about_key, tuple(union_points))


def _register_input_secrets(value: Any, annotation: Any, secrecy: Secrecy = "plain") -> None:
    """Register the secrets of a mapping before it is validated, so the redactor masks them in
    anything printed later, even when validation fails and no ``SecretStr`` was made."""
    if secrecy == "secret":
        for leaf in _leaves(value):
            register_secret(leaf)
        return
    if secrecy == "url":
        for leaf in _leaves(value):
            if urlparse(leaf).scheme in AZURE_SCHEMES:
                continue  # abfs://container@account...: the part before '@' is a container, not a user
            userinfo = leaf.rpartition("@")[0].rpartition("//")[2]
            if userinfo:
                register_secret(userinfo)
                register_secret(userinfo.partition(":")[2])
        return
    if not isinstance(value, dict):
        return
    for member in _members(annotation):
        if not (isinstance(member, type) and issubclass(member, BaseModel)):
            continue
        for key, item in value.items():
            info = _field_named(member, key)
            if info is None:
                continue
            name = str(key)
            if name in PROPERTY_MAPS:
                # Only the entries whose names say secret: a client.id must not mask its words.
                if isinstance(item, dict):
                    for property_name, property_value in item.items():
                        if is_secret_key(str(property_name)):
                            _register_input_secrets(property_value, None, "secret")
                continue
            if name in _CREDENTIAL_KEYS:
                continue  # a user name or a variable name: masking it would hide ordinary words
            _register_input_secrets(item, info.annotation, _field_secrecy(name, info.annotation))
        return


def _closest_key(model: type[BaseModel], location: tuple[Any, ...]) -> str | None:
    """The nearest valid key name at ``location``, for 'did you mean' hints."""
    current: type[BaseModel] | None = model
    for part in location[:-1]:
        if current is None or isinstance(part, int):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        current = _model_in(field.annotation)
    if current is None:
        return None
    matches = difflib.get_close_matches(str(location[-1]), list(current.model_fields), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
