"""Routing records to target partitions when a restore repartitions a topic.

Keyed records go where Kafka's default partitioner (Java's
``BuiltInPartitioner.partitionForKey``: ``Utils.toPositive(Utils.murmur2(key)) %
numPartitions``) would put them, so keyed records land where a Java producer
would put them. Records without a key are spread round-robin by their source
position: ``(source_partition + source_offset) % numPartitions``. That is a
function of the record alone, so a restore that is stopped and run again puts
every record in the same partition as an uninterrupted one would, which is what
lets a re-run recognise the records that already landed.
"""

from __future__ import annotations

import struct

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: the 32-bit MurmurHash2 of ``data``, as a signed Java int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Java's ``Utils.toPositive``: clears the sign bit (not ``abs``)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    return to_positive(murmur2(key)) % partitions


def partition_for_null_key(source_partition: int, source_offset: int, partitions: int) -> int:
    """Round-robin for records without a key, deterministic in the record's source position."""
    return (source_partition + source_offset) % partitions
