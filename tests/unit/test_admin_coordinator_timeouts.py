"""Every request to a group's coordinator leaves librdkafka its longest timeout: the library aborts
the process when it times one out while the coordinator is down (COORDINATOR_REQUEST_TIMEOUT_SECS;
tests/integration/test_fault_nodes_reset.py shows the abort on a real cluster)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from kbackup.core.config import KafkaConnection
from kbackup.core.kafka.admin import COORDINATOR_REQUEST_TIMEOUT_SECS, Admin


def answered(value: object) -> Future[object]:
    future: Future[object] = Future()
    future.set_result(value)
    return future


@dataclass
class RecordingAdminClient:
    """Answers each group request at once and records the timeout it was given, by method."""

    timeouts: dict[str, float | None] = field(default_factory=dict)

    def _record(self, method: str, kwargs: dict[str, Any]) -> None:
        self.timeouts[method] = kwargs.get("request_timeout")

    def list_consumer_group_offsets(self, requests: list[Any], **kwargs: Any) -> dict[str, Future[object]]:
        self._record("list_consumer_group_offsets", kwargs)
        return {requests[0].group_id: answered(SimpleNamespace(topic_partitions=[]))}

    def describe_consumer_groups(self, group_ids: list[str], **kwargs: Any) -> dict[str, Future[object]]:
        self._record("describe_consumer_groups", kwargs)
        description = SimpleNamespace(members=[], state="EMPTY", coordinator=SimpleNamespace(id=2))
        return {group_ids[0]: answered(description)}

    def alter_consumer_group_offsets(self, requests: list[Any], **kwargs: Any) -> dict[str, Future[object]]:
        self._record("alter_consumer_group_offsets", kwargs)
        return {requests[0].group_id: answered(SimpleNamespace(topic_partitions=[]))}

    def delete_consumer_groups(self, group_ids: list[str], **kwargs: Any) -> dict[str, Future[object]]:
        self._record("delete_consumer_groups", kwargs)
        return {group_ids[0]: answered(None)}


@dataclass
class RecordingClients:
    admin_client: RecordingAdminClient
    connection: KafkaConnection = field(
        default_factory=lambda: KafkaConnection.model_validate({"bootstrap_servers": ["127.0.0.1:9"]})
    )
    observer: None = None

    def admin(self) -> RecordingAdminClient:
        return self.admin_client

    def serve_callbacks(self, client: RecordingAdminClient) -> None:
        """A recording client queues no callback."""


CALLS: dict[str, Callable[[Admin], object]] = {
    "list_consumer_group_offsets": lambda admin: admin.committed_offsets_of(["g"]),
    "describe_consumer_groups": lambda admin: admin.describe_groups(["g"]),
    "alter_consumer_group_offsets": lambda admin: admin.alter_offsets("g", {("t", 0): 5}),
    "delete_consumer_groups": lambda admin: admin.delete_group("g"),
}


@pytest.mark.parametrize("method", sorted(CALLS))
def test_a_group_request_gets_the_longest_library_timeout(method: str) -> None:
    client = RecordingAdminClient()
    admin = Admin(RecordingClients(client), request_timeout=1.0)  # type: ignore[arg-type]
    CALLS[method](admin)
    assert client.timeouts == {method: COORDINATOR_REQUEST_TIMEOUT_SECS}


def test_the_coordinator_lookup_gets_it_too() -> None:
    client = RecordingAdminClient()
    admin = Admin(RecordingClients(client), request_timeout=1.0)  # type: ignore[arg-type]
    assert admin.group_coordinator("g") == 2
    assert client.timeouts == {"describe_consumer_groups": COORDINATOR_REQUEST_TIMEOUT_SECS}


def test_the_library_takes_that_timeout_and_nothing_longer() -> None:
    """librdkafka's AdminOptions range ends at one hour: the constant is its longest, not past it."""
    client = AdminClient({"bootstrap.servers": "127.0.0.1:9", "log_level": 0})
    request = [ConsumerGroupTopicPartitions("g")]
    client.list_consumer_group_offsets(request, request_timeout=COORDINATOR_REQUEST_TIMEOUT_SECS)
    with pytest.raises(ValueError, match="request_timeout"):
        client.list_consumer_group_offsets(request, request_timeout=COORDINATOR_REQUEST_TIMEOUT_SECS + 1)
