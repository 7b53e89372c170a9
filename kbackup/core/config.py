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
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlparse

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from kbackup.core.errors import ConfigError
from kbackup.core.secrets import is_secret_key, register_secret

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
            host, _, port = server.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"expected host:port, got {server!r}")
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
        if name is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise ValueError(
                f"{name!r} is not an environment variable name (the variable's name, not its value)"
            )
        return name

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


def encryption_from_spec(spec: str, source: str) -> EncryptionSettings:
    """``--encryption-key``: ``file:PATH``, ``env:NAME`` or ``kms:KEY_ID``."""
    kind, separator, value = spec.partition(":")
    field = {"file": "key_file", "env": "key_env", "kms": "kms_key_id"}.get(kind)
    if not separator or field is None or not value:
        raise ConfigError(
            f"{source}: {spec!r} is not a key source",
            hint="write file:PATH, env:VARIABLE or kms:KEY_ID (an id, ARN or alias/NAME)",
        )
    return validate_config({field: value}, EncryptionSettings, source)


class StorageSettings(StrictModel):
    """Where backups live: a local folder (the default) or an S3-compatible bucket.

    ``url`` picks the backend (``/path``, ``file:///path`` or ``s3://bucket/prefix``).
    The seed tool's ``backend`` + ``path`` / ``bucket`` + ``prefix`` keys are
    accepted as well and turned into a URL.
    """

    url: str | None = Field(
        default=None,
        description=(
            "Where backups live: a folder (`./kafka-backups`, `file:///data/backups`) or "
            "`s3://bucket/prefix`. Unset: built from the keys below, else `./kafka-backups`. A relative "
            "folder is relative to the config file's folder (to the current folder with `--path`)."
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
            "Attempts per S3 request inside botocore (its standard retry mode), with exponential backoff."
        ),
    )
    # botocore's own retries for a connection error span a few seconds at most; this outer
    # loop, with exponential backoff from 0.5 s to 10 s, lets a run ride out an endpoint restart.
    retry_timeout_secs: float = Field(
        default=120,
        ge=0,
        le=3600,
        description=(
            "How long a failing S3 request (connection refused or reset, 5xx, throttling) is tried "
            "again before the run fails with a storage error; 0 turns it off."
        ),
    )

    model_config = ConfigDict(extra="forbid", validate_default=True, populate_by_name=True)

    def resolved_url(self) -> str:
        """The storage URL, built from ``backend``/``path``/``bucket``/``prefix`` when ``url`` is not set."""
        if self.url:
            return self.url
        if self.backend == "s3" or (self.backend is None and self.bucket):
            if not self.bucket:
                raise ConfigError("storage.bucket: required when storage.backend is s3")
            prefix = (self.prefix or "").strip("/")
            return f"s3://{self.bucket}/{prefix}" if prefix else f"s3://{self.bucket}"
        return self.path or DEFAULT_STORAGE_PATH

    @field_validator("endpoint_url")
    @classmethod
    def _check_endpoint(cls, endpoint: str | None) -> str | None:
        # botocore would take 'minio:9000' as an invalid endpoint only on the first request, or
        # 'htp://minio:9000' as one it cannot resolve; both are typos, found here before any call.
        if endpoint is None:
            return endpoint
        parsed = urlparse(endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"expected http(s)://host[:port], got {endpoint!r}")
        try:
            parsed.port  # noqa: B018 (raises ValueError for a port that is not a number from 0 to 65535)
        except ValueError:
            raise ValueError(f"{endpoint!r}: the port is not a number from 0 to 65535") from None
        return endpoint

    @field_validator("url")
    @classmethod
    def _check_scheme(cls, url: str | None) -> str | None:
        if url is None:
            return url
        parsed = urlparse(url)
        scheme = parsed.scheme
        if scheme not in ("", "file", "s3") and not re.match(r"^[A-Za-z]:[\\/]", url):
            raise ValueError(f"expected a folder path, file:// or s3:// URL, got scheme {scheme!r}")
        # A mistyped URL must not quietly become a folder: 's3//bucket/prod' would back up to
        # ./s3/bucket/prod on local disk and exit 0.
        mistyped = _MISTYPED_SCHEME.match(url) if not scheme else None
        if mistyped:
            name, rest = mistyped.group("name"), url[mistyped.end() :]
            # A file: URL always holds an absolute path (file:///srv), whatever was lost with the colon.
            meant = f"file:///{rest.lstrip('/')}" if name.lower() == "file" else f"{name}://{rest}"
            raise ValueError(
                f"{url!r} looks like {meant} with the colon missing (a folder really named so: ./{url})"
            )
        if scheme == "s3" and not parsed.netloc:
            raise ValueError(f"{url!r}: expected s3://bucket[/prefix]")
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


#: The embedded default: a folder beside the config file, or beside where the command runs without one.
DEFAULT_STORAGE_PATH = "./kafka-backups"

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
        problem = str(exc).split(";")[0]
        raise ConfigError(f"{source}: could not parse YAML: a value cannot be converted: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of keys at the top level, got {type(data).__name__}")
    result: dict[str, Any] = _substitute_env(data, (), source)
    return result


def validate_config(data: dict[str, Any], model: type[Model], source: str) -> Model:
    """Validate a mapping against a model; every problem names ``source`` and the key."""
    try:
        validated = model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, model, source)) from None
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


def format_validation_error(exc: ValidationError, model: type[BaseModel], source: str) -> str:
    """One line per problem: ``FILE: KEY: what was wrong (expected ...)``, secrets never echoed."""
    lines = []
    for error in exc.errors(include_url=False):
        location = tuple(error["loc"])
        key = _dotted(location)
        kind = error["type"]
        if kind == "extra_forbidden":
            suggestion = _closest_key(model, location)
            message = "unknown key" + (f" (did you mean {suggestion!r}?)" if suggestion else "")
        elif kind == "missing":
            message = "required key is missing"
        else:
            # A validator's own message is the whole sentence; pydantic's "Value error, " adds nothing.
            message = error["msg"].removeprefix("Value error, ")
            if location and not is_secret_key(str(location[-1])) and "input" in error:
                shown = repr(error["input"])
                if len(shown) <= 60 and shown not in message:
                    message += f" (got {shown})"
        lines.append(f"{source}: {key}: {message}")
    head = lines[0]
    if len(lines) > 1:
        head += f"  [and {len(lines) - 1} more problem(s)]\n  " + "\n  ".join(lines[1:])
    return head


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
