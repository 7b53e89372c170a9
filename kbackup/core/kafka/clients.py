"""confluent-kafka, wrapped in one place.

Every Kafka client kafka-backup makes comes from :class:`KafkaClients`, so
that connection settings, librdkafka's logging, and the translation of Kafka
errors into the project's errors (keeping Kafka's error code) are done once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import difflib
import functools
import logging
import os
import re
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from kbackup.core.config import KafkaConnection
from kbackup.core.errors import ConfigError, KafkaOperationError, KafkaUnreachableError, KBackupError
from kbackup.core.logs import LIBRDKAFKA_LOGGER_NAME

CLIENT_ID_PREFIX = "kafka-backup"

#: The longest a failed first contact spends finding out why no broker answered (name lookups
#: and one TCP connection per bootstrap server), on top of the connect timeout already spent.
UNREACHABLE_PROBE_SECS = 3.0

#: librdkafka error codes that mean "could not talk to any broker".
_UNREACHABLE_CODES = {
    KafkaError._TRANSPORT,
    KafkaError._TIMED_OUT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE,
}
#: Broker answers that mean "not now": a coordinator loading or moving, a leader election.
#: librdkafka does not always flag them retriable in admin results.
_TRANSIENT_CODES = {
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.REQUEST_TIMED_OUT,
    # A leader that just changed (a node killed, a controller failing over): Kafka's own clients
    # retry these, librdkafka does not flag them retriable in an admin answer.
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.OFFSET_NOT_AVAILABLE,
}
_AUTH_CODES = {
    KafkaError._AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._SSL,
}


def kafka_error_of(exc: BaseException) -> KafkaError | None:
    """The ``KafkaError`` inside a ``KafkaException`` (or the error itself)."""
    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def translate_kafka_error(exc: BaseException, *, action: str, connection: KafkaConnection) -> KBackupError:
    """Turn a confluent-kafka exception into a project error that keeps Kafka's code.

    ``action`` says what was being done ("list topics", "commit offsets of group g1").
    """
    error = kafka_error_of(exc)
    servers = ",".join(connection.bootstrap_servers)
    if error is None:
        return KafkaOperationError(f"{action} on {servers} failed: {exc}")
    code, name = error.code(), error.name()
    if code in _UNREACHABLE_CODES:
        return KafkaUnreachableError(
            f"no broker of {servers} answered within {connection.connect_timeout_secs:g}s "
            f"while trying to {action}",
            hint=_UNREACHABLE_HINT,
        )
    if code == KafkaError._SSL:
        # librdkafka's text says what TLS refused ("certificate verify failed", "wrong version number").
        return KafkaOperationError(
            f"TLS with {servers} failed while trying to {action}: {error.str()}",
            code=code,
            code_name=name,
            hint="check security.ssl_ca_location (a PEM of the CA that signed the brokers' certificates), "
            "that the brokers' certificates name the host you connect to "
            "(or ssl_endpoint_identification_algorithm), and that this port speaks TLS",
            retryable=False,
        )
    if code in _AUTH_CODES:
        return KafkaOperationError(
            f"authentication with {servers} failed while trying to {action} ({name})",
            code=code,
            code_name=name,
            hint="check security.sasl_username/sasl_password or the SSL settings of this connection",
            retryable=False,
        )
    if code == KafkaError._INVALID_ARG:
        return setting_error(connection, error.str())
    return KafkaOperationError(
        f"{action} on {servers} failed: {name}: {error.str()}",
        code=code,
        code_name=name,
        retryable=bool(error.retriable()) or code in _TRANSIENT_CODES or _no_leader_yet(error),
    )


def _no_leader_yet(error: KafkaError) -> bool:
    """librdkafka's own answer to a ListOffsets while a partition has no leader (its node just
    killed, the election not yet done): ``_NOENT``, "No leaders found". Kafka elects one within
    seconds; other ``_NOENT`` answers (a missing entry) stay final."""
    return error.code() == KafkaError._NOENT and "no leaders found" in error.str().lower()


class ClusterObserver(Protocol):
    """Told how the requests to a cluster go (metrics, readiness). Called from the thread that
    waits for an answer, or serves the clients' callbacks."""

    def cluster_error(self, kind: str) -> None:
        """A client reported an error, or an admin request failed and is tried again; ``kind`` is
        librdkafka's error name (``_TRANSPORT``) or the project error's kind."""

    def cluster_waiting(self) -> None:
        """A request was sent and its answer is awaited."""

    def cluster_answered(self) -> None:
        """A request was answered."""


class KafkaClients:
    """Factory of admin, consumer and producer clients for one cluster."""

    def __init__(
        self,
        connection: KafkaConnection,
        *,
        client_id: str = CLIENT_ID_PREFIX,
        observer: ClusterObserver | None = None,
    ) -> None:
        self.connection = connection
        self.client_id = client_id
        #: The last authentication failure any client of this factory reported (see :meth:`list_topics`).
        self.auth_failure: KafkaError | None = None
        #: Told of every error a client reports, of every failed admin attempt, and of each request
        #: waited for and answered, for metrics and readiness.
        self.observer = observer

    def _on_client_error(self, error: KafkaError) -> None:
        # With wrong credentials a metadata request only says "transport failure"; librdkafka
        # reports the real cause through this callback, which list_topics() consults.
        if error.code() in _AUTH_CODES:
            self.auth_failure = error
        if self.observer is not None:
            self.observer.cluster_error(error.name())

    def _base_properties(self) -> dict[str, Any]:
        props: dict[str, Any] = {
            "client.id": self.client_id,
            "socket.connection.setup.timeout.ms": int(self.connection.connect_timeout_secs * 1000),
            "logger": logging.getLogger(LIBRDKAFKA_LOGGER_NAME),
            "error_cb": self._on_client_error,
        }
        props.update(self.connection.librdkafka_properties())
        return props

    def list_topics(self, client: AdminClient, *, action: str = "read cluster metadata") -> Any:
        """One metadata request; a failure caused by rejected credentials is reported as such.

        Raises ``KafkaOperationError`` (authentication) or ``KafkaUnreachableError`` naming the servers.
        """
        if self.observer is not None:
            self.observer.cluster_waiting()
        try:
            answer = client.list_topics(timeout=self.connection.connect_timeout_secs)
        except KafkaException as exc:
            self.serve_callbacks(client)  # error_cb names an authentication failure if there was one
            error = kafka_error_of(exc)
            if error is not None and error.code() in _UNREACHABLE_CODES and self.auth_failure is not None:
                raise translate_kafka_error(
                    KafkaException(self.auth_failure), action=action, connection=self.connection
                ) from None
            translated = translate_kafka_error(exc, action=action, connection=self.connection)
            if isinstance(translated, KafkaUnreachableError):
                translated = with_unreachable_reason(translated, self.connection)
            raise translated from None
        # Errors met on the way to the answer (a connection reset, then a retry that worked) are
        # counted before the answer is.
        self.serve_callbacks(client)
        if self.observer is not None:
            self.observer.cluster_answered()
        return answer

    def serve_callbacks(self, client: AdminClient) -> None:
        """Serve what librdkafka queued for an admin client's callbacks: ``error_cb`` (the observer
        counts each error) and its log lines. A consumer or a producer serves its own in each
        ``poll``; an admin client's wait only here, after each metadata request and admin answer."""
        client.poll(0)

    def _create(self, factory: Any, props: dict[str, Any], what: str) -> Any:
        try:
            return factory(props)
        except KafkaException as exc:
            # librdkafka's error for a missing CA file names neither the file nor the key.
            problem = file_problem(self.connection)
            if problem is not None:
                raise problem from None
            raise translate_kafka_error(exc, action=f"create a {what}", connection=self.connection) from None

    def admin(self, **overrides: Any) -> AdminClient:
        client: AdminClient = self._create(
            AdminClient, {**self._base_properties(), **overrides}, "Kafka admin client"
        )
        return client

    def producer(self, **overrides: Any) -> Producer:
        props = {**self._base_properties(), "enable.idempotence": True, "acks": "all", **overrides}
        producer: Producer = self._create(Producer, props, "Kafka producer")
        return producer

    def consumer(
        self, group_id: str | None = None, properties: dict[str, Any] | None = None, **overrides: Any
    ) -> Consumer:
        """A consumer; ``properties`` (dotted librdkafka names) and ``overrides`` win over the defaults."""
        props = {
            **self._base_properties(),
            # A consumer needs a group id even when it only assigns partitions and never commits.
            "group.id": group_id or f"{self.client_id}-reader",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            **(properties or {}),
            **overrides,
        }
        consumer: Consumer = self._create(Consumer, props, "Kafka consumer")
        return consumer


def check_client_properties(connection: KafkaConnection, *, where: str = "") -> None:
    """Reject unknown or malformed librdkafka properties, and files that cannot be read, without
    touching the network; ``where`` is the connection's section (``source``), for the keys named.

    A producer created without ``bootstrap.servers`` validates its whole
    configuration but opens no connection.
    """
    problem = file_problem(connection, where=where)
    if problem is not None:
        raise problem
    props: dict[str, Any] = {
        key: value for key, value in connection.librdkafka_properties().items() if key != "bootstrap.servers"
    }
    props["logger"] = logging.getLogger(LIBRDKAFKA_LOGGER_NAME)
    try:
        Producer(props).flush(0)
    except KafkaException as exc:
        error = kafka_error_of(exc)
        raise setting_error(connection, error.str() if error is not None else str(exc), where=where) from None


def check_producer_properties(properties: dict[str, str], *, where: str) -> None:
    """Reject unknown or malformed librdkafka producer properties (``where``: their config key)
    without touching the network."""
    props: dict[str, Any] = {**properties, "logger": logging.getLogger(LIBRDKAFKA_LOGGER_NAME)}
    try:
        Producer(props).flush(0)
    except KafkaException as exc:
        error = kafka_error_of(exc)
        detail = error.str() if error is not None else str(exc)
        raise _property_error(detail, lambda name: f"{where}.{name}") or ConfigError(
            f"{where}: {detail}"
        ) from None


# -- what went wrong, in the user's keys ---------------------------------------------------------------

#: librdkafka properties whose value names a file read when a client is created.
_TLS_FILE_PROPERTIES = (
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.crl.location",
    "ssl.keystore.location",
)
_SASL_FILE_PROPERTIES = ("sasl.kerberos.keytab",)
_UNKNOWN_PROPERTY = re.compile(r'No such configuration property: "([^"]+)"')
_PROPERTY_FAILED = re.compile(r"(?:Failed to create \w+: )?([a-z][a-z0-9._]+) failed: (.*)")


def key_of(connection: KafkaConnection, name: str, *, where: str = "") -> str:
    """The config key a librdkafka property ``name`` of ``connection`` was written as."""
    prefix = f"{where}." if where else ""
    if name in connection.properties:
        return f"{prefix}properties.{name}"
    field = name.replace(".", "_")
    if getattr(connection.security, field, None) is not None:
        return f"{prefix}security.{field}"
    return f"{prefix}properties.{name}"


def file_problem(connection: KafkaConnection, *, where: str = "") -> ConfigError | None:
    """A file the connection names that librdkafka would fail to read, named by its key and path.

    librdkafka reports a missing CA file as an OpenSSL ``BIO`` error without the file or the key;
    checked here first. Only the files a client reads are checked: the TLS files with SSL or
    SASL_SSL, a Kerberos keytab with a SASL protocol.
    """
    props = connection.librdkafka_properties()
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    names: tuple[str, ...] = ()
    if protocol in ("SSL", "SASL_SSL"):
        names += _TLS_FILE_PROPERTIES
    if protocol.startswith("SASL"):
        names += _SASL_FILE_PROPERTIES
    for name in names:
        value = props.get(name)
        # 'probe' asks librdkafka to find the system's CAs: not a path.
        if not value or (name == "ssl.ca.location" and value == "probe"):
            continue
        path = Path(value)
        reason = None
        if not path.exists():
            reason = "no such file" if path.parent.is_dir() else f"no such folder {path.parent}"
        elif path.is_dir() and name != "ssl.ca.location":  # a CA folder is a hashed-certificates dir
            reason = "a folder, not a file"
        elif not os.access(path, os.R_OK):
            reason = "not readable by this user"
        if reason is not None:
            return ConfigError(
                f"{key_of(connection, name, where=where)}: {value}: {reason}",
                hint="give the path of a PEM file this user can read (a relative path is relative to the "
                "config file's folder)",
            )
    return None


def setting_error(connection: KafkaConnection, detail: str, *, where: str = "") -> ConfigError:
    """librdkafka's refusal of the connection's settings (``detail``), at the key the user wrote."""
    props = connection.librdkafka_properties()

    def named(name: str) -> str:
        key = key_of(connection, name, where=where)
        # A file's path is never a secret, and says which file librdkafka could not use.
        is_file = name in (*_TLS_FILE_PROPERTIES, *_SASL_FILE_PROPERTIES) and name in props
        return f"{key}: {props[name]}" if is_file else key

    found = _property_error(detail, named)
    if found is not None:
        return found
    return ConfigError(f"invalid Kafka client setting: {detail}")


def _property_error(detail: str, key: Any) -> ConfigError | None:
    unknown = _UNKNOWN_PROPERTY.search(detail)
    if unknown is not None:
        name = unknown.group(1)
        close = difflib.get_close_matches(name, known_properties(), n=1, cutoff=0.75)
        suggestion = f" (did you mean '{close[0]}'?)" if close else ""
        return ConfigError(
            f"{key(name)}: librdkafka has no such property{suggestion}",
            hint="see librdkafka's CONFIGURATION.md for the properties a Kafka client takes",
        )
    failed = _PROPERTY_FAILED.search(detail)
    if failed is not None:
        name, why = failed.groups()
        return ConfigError(f"{key(name)}: librdkafka cannot use it: {why}")
    return None


@functools.cache
def known_properties() -> tuple[str, ...]:
    """The configuration properties the loaded librdkafka knows (its own table, as
    ``rd_kafka_conf_properties_show`` prints it); empty where the library cannot be asked."""
    try:
        return tuple(_librdkafka_property_table())
    except (OSError, AttributeError, ValueError):
        return ()


def _librdkafka_property_table() -> list[str]:
    package = Path(confluent_kafka.__file__).parent
    bundled = sorted((package.parent / "confluent_kafka.libs").glob("librdkafka*"))
    bundled += sorted(package.parent.glob("confluent_kafka/.dylibs/librdkafka*"))
    library = str(bundled[0]) if bundled else ctypes.util.find_library("rdkafka")
    libc_name = ctypes.util.find_library("c")
    if library is None or libc_name is None:
        return []
    rdkafka, libc = ctypes.CDLL(library), ctypes.CDLL(libc_name)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    rdkafka.rd_kafka_conf_properties_show.argtypes = [ctypes.c_void_p]
    with tempfile.TemporaryDirectory(prefix="kafka-backup-") as folder:
        table = Path(folder) / "properties.md"
        handle = libc.fopen(str(table).encode(), b"w")
        if not handle:
            return []
        rdkafka.rd_kafka_conf_properties_show(handle)
        libc.fclose(handle)
        text = table.read_text(errors="replace")
    return sorted({match.group(1) for match in re.finditer(r"^([a-z][a-z0-9._]*)\s+\|", text, re.MULTILINE)})


def with_unreachable_reason(
    error: KafkaUnreachableError, connection: KafkaConnection
) -> KafkaUnreachableError:
    """``error`` with what the bootstrap servers' names and ports say: a name that does not
    resolve, a port nothing listens on, a connection that times out."""
    found = unreachable_reason(
        connection.bootstrap_servers, min(UNREACHABLE_PROBE_SECS, connection.connect_timeout_secs)
    )
    if found is None:
        return error
    reason, hint = found
    return KafkaUnreachableError(f"{error.message}: {reason}", hint=hint, retryable=error.retryable)


_UNREACHABLE_HINT = (
    "check the bootstrap servers, that the cluster is up, and network/firewall rules; "
    "raise connect_timeout_secs for slow networks"
)
_UNREACHABLE_HINTS = {
    "resolve": "check the host names in bootstrap_servers (a typo? a name only another network's DNS knows?)",
    "refused": "check the ports in bootstrap_servers and that the brokers are running",
}


def unreachable_reason(servers: list[str], timeout_secs: float) -> tuple[str, str] | None:
    """Why none of ``servers`` answered, from a name lookup and a TCP connection to each (no
    Kafka request), and what to check; None when each server accepts a connection."""
    deadline = time.monotonic() + timeout_secs
    reasons: list[str] = []
    kinds: set[str] = set()
    for server in servers:
        host, _, port_text = server.rpartition(":")
        host = host.strip("[]")
        try:
            socket.getaddrinfo(host, int(port_text), type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            if exc.errno == socket.EAI_AGAIN:
                reasons.append(f"the host name {host} could not be looked up ({exc.strerror})")
                kinds.add("lookup")
            else:
                reasons.append(f"the host name {host} does not resolve")
                kinds.add("resolve")
            continue
        except (OSError, ValueError):
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            with socket.create_connection((host, int(port_text)), timeout=remaining):
                kinds.add("open")
        except ConnectionRefusedError:
            reasons.append(f"nothing listens at {server} (connection refused)")
            kinds.add("refused")
        except TimeoutError:
            reasons.append(
                f"{server} does not accept a connection (timed out: a firewall, or a wrong address?)"
            )
            kinds.add("timeout")
        except OSError as exc:
            reasons.append(f"{server} cannot be reached ({exc.strerror or exc})")
            kinds.add("network")
    if not reasons:
        return None
    only = kinds.pop() if len(kinds) == 1 else None
    return "; ".join(reasons), _UNREACHABLE_HINTS.get(only or "", _UNREACHABLE_HINT)
