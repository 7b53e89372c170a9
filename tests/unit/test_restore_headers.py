"""The origin headers' exact encoding: the mapping and reset stages depend on it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kbackup.format.origin import (
    ORIGIN_HEADERS,
    Header,
    Origin,
    origin_headers,
    parse_origin,
    stamp_batch,
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


def rule_origin(headers: list[tuple[str, bytes | str | None]] | None) -> Origin | None:
    """The documented rule, written out plainly: the last non-null value of each of the five names."""
    found: dict[str, bytes] = {}
    for name, value in headers or []:
        if value is not None and name.startswith("x-kafka-backup-"):
            found[name] = value.encode() if isinstance(value, str) else value
    try:
        return Origin(
            found["x-kafka-backup-cluster"].decode(),
            found["x-kafka-backup-topic"].decode(),
            int(found["x-kafka-backup-partition"]),
            int(found["x-kafka-backup-offset"]),
            int(found["x-kafka-backup-timestamp"]),
        )
    except (KeyError, ValueError, UnicodeDecodeError):
        return None


_origin_names = st.sampled_from(
    [
        "x-kafka-backup-cluster",
        "x-kafka-backup-topic",
        "x-kafka-backup-partition",
        "x-kafka-backup-offset",
        "x-kafka-backup-timestamp",
        "x-kafka-backup-other",
        "app",
    ]
)
_header_values = st.one_of(
    st.none(),
    st.sampled_from([b"0", b"42", b"-1", b"c1", b"orders", b"\xff\xfe", b"", "7", "c1", b" 5 "]),
    st.integers(min_value=-5, max_value=10**6).map(lambda n: str(n).encode()),
)


@settings(max_examples=500, deadline=None)
@given(
    noise=st.lists(st.tuples(_origin_names, _header_values), max_size=8),
    complete=st.booleans(),
    tail=st.lists(st.tuples(_origin_names, _header_values), max_size=3),
)
def test_parse_origin_follows_the_rule_for_any_headers(
    noise: list[tuple[str, bytes | str | None]], complete: bool, tail: list[tuple[str, bytes | str | None]]
) -> None:
    # Often a complete, valid set in the middle, so the fast path and its fall-backs are both taken.
    valid = origin_headers(Origin("c1", "orders", 3, 99, 5)) if complete else []
    headers = [*noise, *valid, *tail]
    assert parse_origin(headers) == rule_origin(headers)


def test_a_batch_is_stamped_as_each_record_would_be() -> None:
    """The encoder restore produces with gives every record exactly origin_headers() of its origin,
    after its own headers minus any stale x-kafka-backup-*."""
    offsets, timestamps = [7, 8, 10], [100, -1, 102]
    plain = stamp_batch("c1", "orders", 2, offsets, timestamps)
    assert plain == [
        origin_headers(Origin("c1", "orders", 2, o, t)) for o, t in zip(offsets, timestamps, strict=True)
    ]
    own: list[list[Header]] = [[("a", b"1"), ("x-kafka-backup-offset", b"5")], [], [("b", None)]]
    stamped = stamp_batch("c1", "orders", 2, offsets, timestamps, own)
    assert stamped[0] == [("a", b"1"), *plain[0]]
    assert stamped[1] == plain[1]
    assert stamped[2] == [("b", None), *plain[2]]
    assert [parse_origin(headers) for headers in stamped] == [
        Origin("c1", "orders", 2, o, t) for o, t in zip(offsets, timestamps, strict=True)
    ]
