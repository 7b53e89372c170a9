"""The origin headers' exact encoding: the mapping and reset stages depend on it."""

from __future__ import annotations

from kbackup.core.origin import (
    ORIGIN_HEADERS,
    Origin,
    origin_headers,
    parse_origin,
    without_origin_headers,
)


def test_origin_headers_are_five_in_order_with_ascii_decimal_numbers() -> None:
    headers = origin_headers(Origin("prod-us-east-1", "orders", 2, 12345, 1763780100000))
    assert headers == [
        ("x-kafka-backup-cluster", b"prod-us-east-1"),
        ("x-kafka-backup-topic", b"orders"),
        ("x-kafka-backup-partition", b"2"),
        ("x-kafka-backup-offset", b"12345"),
        ("x-kafka-backup-timestamp", b"1763780100000"),
    ]
    assert tuple(name for name, _ in headers) == ORIGIN_HEADERS


def test_a_record_without_timestamp_gets_minus_one() -> None:
    assert origin_headers(Origin("c", "t", 0, 0, -1))[-1] == ("x-kafka-backup-timestamp", b"-1")


def test_utf8_topic_and_cluster_round_trip() -> None:
    parsed = parse_origin(origin_headers(Origin("clüster", "t.ü", 0, 7, 9)))
    assert parsed == Origin("clüster", "t.ü", 0, 7, 9)


def test_existing_origin_headers_are_dropped_and_own_headers_kept_in_order() -> None:
    own = [
        ("a", b"1"),
        ("x-kafka-backup-offset", b"5"),
        ("a", None),
        ("x-kafka-backup-cluster", b"old"),
        ("b", b""),
    ]
    assert without_origin_headers(own) == [("a", b"1"), ("a", None), ("b", b"")]


def test_parse_origin_takes_the_last_occurrence_and_needs_all_five() -> None:
    stale = origin_headers(Origin("old", "t", 0, 1, 1))
    fresh = origin_headers(Origin("new", "u", 3, 99, 2))
    assert parse_origin([("k", b"v"), *stale, *fresh]) == Origin("new", "u", 3, 99, 2)
    assert parse_origin(fresh[:4]) is None
    assert parse_origin(None) is None
    assert parse_origin([*fresh[:3], ("x-kafka-backup-offset", b"not-a-number"), fresh[4]]) is None
