"""Messages to Arrow: every field kept exactly (built from confluent-kafka's own Message objects)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Message

from kbackup.backup.records import messages_to_batch
from kbackup.format.schema import RECORD_SCHEMA


def message(offset: int, **fields: Any) -> Message:
    defaults: dict[str, Any] = {
        "key": b"k",
        "value": b"v",
        "headers": None,
        "timestamp": (1, 1_000 + offset),
    }
    return Message(topic="orders", partition=3, offset=offset, **{**defaults, **fields})


def test_every_field_is_kept() -> None:
    messages = [
        message(10),
        message(11, key=None, value=None),
        message(14, headers=[("h", b"\x00\xff"), ("h", b"\x00\xff"), ("n", None)]),
        message(15, timestamp=(2, 99), value=b"\x00" * 5000),
        message(20, headers=[], timestamp=(0, -1)),
    ]
    batch = messages_to_batch(messages, "prod-east", "orders", 3)
    assert batch.schema.equals(RECORD_SCHEMA)
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == [10, 11, 14, 15, 20]
    assert {r["source_cluster"] for r in rows} == {"prod-east"}
    assert {(r["topic"], r["partition"]) for r in rows} == {("orders", 3)}
    assert [r["key"] for r in rows] == [b"k", None, b"k", b"k", b"k"]
    assert [r["value"] for r in rows] == [b"v", None, b"v", b"\x00" * 5000, b"v"]
    assert rows[2]["headers"] == [
        {"key": "h", "value": b"\x00\xff"},
        {"key": "h", "value": b"\x00\xff"},
        {"key": "n", "value": None},
    ]
    assert [r["headers"] for r in rows if r["offset"] != 14] == [[], [], [], []]
    # Kafka's numbering: 0 CreateTime, 1 LogAppendTime, -1 none.
    assert [(r["timestamp_type"], r["timestamp"]) for r in rows] == [
        (0, 1010),
        (0, 1011),
        (0, 1014),
        (1, 99),
        (-1, -1),
    ]


def test_a_batch_without_headers_or_mixed_types_uses_the_fast_columns() -> None:
    batch = messages_to_batch([message(i) for i in range(100)], "c", "orders", 3)
    assert batch.column("headers").to_pylist() == [[]] * 100
    assert set(batch.column("timestamp_type").to_pylist()) == {0}
    assert batch.column("timestamp").to_pylist() == [1_000 + i for i in range(100)]


def test_end_of_partition_events_take_the_record_by_record_path() -> None:
    """The fast path must recognise error events (KafkaError cannot be compared with None)."""
    from confluent_kafka import KafkaError

    from kbackup.backup.copier import _error

    event = Message(topic="orders", partition=3, offset=7, error=KafkaError(KafkaError._PARTITION_EOF))
    assert any(map(_error, [message(1), event]))
    assert not any(map(_error, [message(1), message(2)]))
