"""An answer that only says a partition's leader just changed is retried, not a failed run: seen
as FENCED_LEADER_EPOCH on the restore's ListOffsets while a three-node target's controller was
killed (tests/integration/test_fault_nodes_restore.py)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from kbackup.core.config import KafkaConnection
from kbackup.core.kafka import translate_kafka_error

CONNECTION = KafkaConnection.model_validate({"bootstrap_servers": ["127.0.0.1:9"]})


@pytest.mark.parametrize(
    "code",
    [KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.OFFSET_NOT_AVAILABLE],
)
def test_a_leader_change_is_retryable(code: int) -> None:
    error = translate_kafka_error(
        KafkaException(KafkaError(code)), action="list offsets", connection=CONNECTION
    )
    assert error.retryable


def test_a_refusal_stays_final() -> None:
    error = translate_kafka_error(
        KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)),
        action="list offsets",
        connection=CONNECTION,
    )
    assert not error.retryable


def test_no_leader_yet_is_retryable_and_another_missing_entry_is_not() -> None:
    """A unit of a restore on workers listed offsets while the partition's leader was just killed
    (tests/integration/test_fault_nodes_restore.py, two workers): librdkafka answers _NOENT."""
    no_leader = KafkaError(KafkaError._NOENT, "Failed to query partition leaders: No leaders found")
    error = translate_kafka_error(KafkaException(no_leader), action="list offsets", connection=CONNECTION)
    assert error.retryable
    missing = KafkaError(KafkaError._NOENT, "No such entry")
    assert not translate_kafka_error(KafkaException(missing), action="list", connection=CONNECTION).retryable
