"""Kafka's murmur2 partitioner in pure Python, checked against the Java client's own test vectors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbackup.restore.partitioner import (
    murmur2,
    partition_for_key,
    partition_for_null_key,
    to_positive,
)

# org.apache.kafka.common.utils.UtilsTest#testMurmur2 (Apache Kafka), every length mod 4 included.
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), JAVA_VECTORS.items(), ids=lambda v: repr(v)[:20])
def test_murmur2_matches_kafka_java_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_to_positive_clears_the_sign_bit_like_java() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5
    # Not abs(): Java's toPositive(-973932308) is 1173551340.
    assert to_positive(-973932308) == 1173551340


def test_partition_for_key_is_to_positive_murmur2_modulo() -> None:
    assert partition_for_key(b"foobar", 6) == (-790332482 & 0x7FFFFFFF) % 6
    assert partition_for_key(b"21", 3) == 1173551340 % 3


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_for_key_is_in_range_and_signed_32_bit(key: bytes, partitions: int) -> None:
    hashed = murmur2(key)
    assert -(2**31) <= hashed < 2**31
    assert 0 <= partition_for_key(key, partitions) < partitions


def test_null_keys_go_round_robin_by_source_position() -> None:
    targets = [partition_for_null_key(1, offset, 4) for offset in range(8)]
    assert targets == [1, 2, 3, 0, 1, 2, 3, 0]
    counts = [0] * 6
    for offset in range(600):
        counts[partition_for_null_key(0, offset, 6)] += 1
    assert counts == [100] * 6
