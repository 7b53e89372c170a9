"""confluent-kafka, wrapped in one place.

Every Kafka client kafka-backup makes comes from :class:`KafkaClients`, so
that connection settings, librdkafka's logging, and the translation of Kafka
errors into the project's errors (keeping Kafka's error code) are done once.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from kbackup.core.config import KafkaConnection
from kbackup.core.errors import ConfigError, KafkaOperationError, KafkaUnreachableError, KBackupError
from kbackup.core.logs import LIBRDKAFKA_LOGGER_NAME

CLIENT_ID_PREFIX = "kafka-backup"

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
            hint="check the bootstrap servers, that the cluster is up, and network/firewall rules; "
            "raise connect_timeout_secs for slow networks",
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
        return ConfigError(f"invalid Kafka client setting: {error.str()}")
    return KafkaOperationError(
        f"{action} on {servers} failed: {name}: {error.str()}",
        code=code,
        code_name=name,
        retryable=bool(error.retriable()) or code in _TRANSIENT_CODES,
    )


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
            raise translate_kafka_error(exc, action=action, connection=self.connection) from None
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


def check_client_properties(connection: KafkaConnection) -> None:
    """Reject unknown or malformed librdkafka properties without touching the network.

    A producer created without ``bootstrap.servers`` validates its whole
    configuration but opens no connection.
    """
    props: dict[str, Any] = {
        key: value for key, value in connection.librdkafka_properties().items() if key != "bootstrap.servers"
    }
    props["logger"] = logging.getLogger(LIBRDKAFKA_LOGGER_NAME)
    try:
        Producer(props).flush(0)
    except KafkaException as exc:
        error = kafka_error_of(exc)
        detail = error.str() if error is not None else str(exc)
        raise ConfigError(f"invalid Kafka client property: {detail}") from None
