"""Committing a group's offsets waits out a coordinator that is still loading, and fails at once otherwise."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError

from kbackup.core.config import KafkaConnection
from kbackup.core.errors import KafkaOperationError
from kbackup.core.kafka.admin import Admin


@dataclass
class ScriptedAdminClient:
    """Answers alter_consumer_group_offsets with the per-partition errors of a script, one call each."""

    errors: list[int | None]
    calls: int = 0

    def alter_consumer_group_offsets(
        self, requests: list[ConsumerGroupTopicPartitions], request_timeout: float
    ) -> dict[str, Future[Answer]]:
        (request,) = requests
        code = self.errors[min(self.calls, len(self.errors) - 1)]
        self.calls += 1
        answered = [
            Answered(tp.topic, tp.partition, None if code is None else KafkaError(code))
            for tp in request.topic_partitions or []
        ]
        future: Future[Answer] = Future()
        future.set_result(Answer(answered))
        return {request.group_id: future}


@dataclass
class Answered:
    """One partition of the broker's answer (confluent-kafka's TopicPartition.error is read-only)."""

    topic: str
    partition: int
    error: KafkaError | None


@dataclass
class Answer:
    topic_partitions: list[Answered]


@dataclass
class ScriptedClients:
    admin_client: ScriptedAdminClient
    connection: KafkaConnection = field(
        default_factory=lambda: KafkaConnection.model_validate({"bootstrap_servers": ["127.0.0.1:9"]})
    )
    observer: None = None

    def admin(self) -> ScriptedAdminClient:
        return self.admin_client

    def serve_callbacks(self, client: ScriptedAdminClient) -> None:
        """A scripted client queues no callback."""


def test_a_loading_coordinator_is_waited_out() -> None:
    script = ScriptedAdminClient([KafkaError.COORDINATOR_LOAD_IN_PROGRESS] * 3 + [None])
    admin = Admin(ScriptedClients(script), retry_secs=30)  # type: ignore[arg-type]
    admin.alter_offsets("g", {("t", 0): 5, ("t", 1): 7})
    assert script.calls == 4


def test_a_refusal_that_retrying_cannot_help_fails_at_once() -> None:
    script = ScriptedAdminClient([KafkaError.GROUP_AUTHORIZATION_FAILED])
    admin = Admin(ScriptedClients(script), retry_secs=30)  # type: ignore[arg-type]
    with pytest.raises(KafkaOperationError) as raised:
        admin.alter_offsets("g", {("t", 0): 5})
    assert script.calls == 1
    assert "t/0" in str(raised.value)
