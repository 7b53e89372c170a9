"""What a principal may do on a cluster, found by doing it: the proof that restored ACLs and SCRAM
users grant on the target what they granted on the source.

Each check is one real request made as the connection's principal; its answer is ``allowed``,
``denied`` (Kafka's authorization error for that resource), or the other error's name (a check
that could not tell: the topic is missing, the cluster did not answer). Writing appends one
record: checks that write go to topics made for them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kbackup.core.kafka.admin import COORDINATOR_REQUEST_TIMEOUT_SECS
from kbackup.core.kafka.clients import KafkaClients, kafka_error_of
from kbackup.core.retry import call_with_retries

#: What a check does: describe a topic (metadata), write one record to it, read the first record of
#: its partition 0, describe a group (its members and committed offsets are the group's own), start
#: a producer with a transactional id, or describe the cluster's ACLs.
Operation = Literal[
    "describe-topic", "write-topic", "read-topic", "describe-group", "transactional-id", "describe-acls"
]

_DENIED = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
_TIMEOUT = 15.0


@dataclass(frozen=True)
class AccessCheck:
    operation: Operation
    #: The topic, group or transactional id ("" for describe-acls).
    resource: str = ""

    def __str__(self) -> str:
        return f"{self.operation} {self.resource}".strip()


def _outcome(error: KafkaError | None) -> str:
    if error is None:
        return "allowed"
    return "denied" if error.code() in _DENIED else str(error.name())


def _raised(exc: BaseException) -> str:
    error = kafka_error_of(exc)
    return _outcome(error) if error is not None else type(exc).__name__


#: Answers of a cluster still settling (a group coordinator loading just after a restore): asked
#: again until the check can tell.
_SETTLING = {"NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "_TIMED_OUT"}


def check_access(clients: KafkaClients, check: AccessCheck, *, within_secs: float = 30.0) -> str:
    """``allowed``, ``denied``, or the name of the error that kept the check from telling."""

    def once() -> str:
        try:
            return _CHECKS[check.operation](clients, check)
        except KafkaException as exc:
            return _raised(exc)

    return call_with_retries(
        once, within_secs=within_secs, delay_secs=0.5, until=lambda outcome: outcome not in _SETTLING
    )


def _describe_topic(clients: KafkaClients, check: AccessCheck) -> str:
    admin: AdminClient = clients.admin()
    topic = admin.list_topics(topic=check.resource, timeout=_TIMEOUT).topics.get(check.resource)
    return _outcome(topic.error if topic is not None else None)


def _write_topic(clients: KafkaClients, check: AccessCheck) -> str:
    producer = clients.producer(**{"enable.idempotence": False, "acks": "all", "message.timeout.ms": 15000})
    errors: list[KafkaError | None] = []
    producer.produce(
        check.resource, value=b"access-check", on_delivery=lambda error, _msg: errors.append(error)
    )
    producer.flush(_TIMEOUT + 5)
    return _outcome(errors[0]) if errors else "_TIMED_OUT"


def _read_topic(clients: KafkaClients, check: AccessCheck) -> str:
    # Partition 0 from offset 0, assigned: a fetch asks Read on the topic, nothing of a group.
    described = _describe_topic(clients, check)
    if described != "allowed":
        # Read implies Describe: a topic the principal may not describe it may not read (and
        # librdkafka only waits for a topic missing from its metadata, never says why).
        return described
    # librdkafka still looks up the consumer's group coordinator: the refusal of that (the principal
    # has no right on the reader's group) is not the topic's answer, and is passed over.
    consumer = clients.consumer()
    deadline = time.monotonic() + _TIMEOUT
    try:
        consumer.assign([TopicPartition(check.resource, 0, 0)])
        while (left := deadline - time.monotonic()) > 0:
            message = consumer.poll(min(left, 1.0))
            if message is None:
                continue
            error = message.error()
            if error is None or error.code() != KafkaError.GROUP_AUTHORIZATION_FAILED:
                return _outcome(error)
        return "_TIMED_OUT"
    finally:
        consumer.close()


def _describe_group(clients: KafkaClients, check: AccessCheck) -> str:
    admin: AdminClient = clients.admin()
    future = admin.describe_consumer_groups(
        [check.resource], request_timeout=COORDINATOR_REQUEST_TIMEOUT_SECS
    )[check.resource]
    try:
        future.result(_TIMEOUT)
    except KafkaException as exc:
        return _raised(exc)
    except TimeoutError:
        return "_TIMED_OUT"
    return "allowed"


def _transactional_id(clients: KafkaClients, check: AccessCheck) -> str:
    producer = clients.producer(**{"transactional.id": check.resource, "transaction.timeout.ms": 10000})
    producer.init_transactions(_TIMEOUT)
    return "allowed"


def _describe_acls(clients: KafkaClients, check: AccessCheck) -> str:
    # librdkafka drops the error of a refused DescribeAcls (an empty list), so ask what the
    # principal may do on the cluster instead (see Admin.cluster_operations).
    admin: AdminClient = clients.admin()
    answer = admin.describe_cluster(include_authorized_operations=True, request_timeout=_TIMEOUT).result(
        _TIMEOUT + 5
    )
    operations = {operation.name for operation in answer.authorized_operations or []}
    return "allowed" if operations & {"DESCRIBE", "ALL"} else "denied"


_CHECKS = {
    "describe-topic": _describe_topic,
    "write-topic": _write_topic,
    "read-topic": _read_topic,
    "describe-group": _describe_group,
    "transactional-id": _transactional_id,
    "describe-acls": _describe_acls,
}
