"""The origin headers restore stamps on every record, and how to read them back.

Encoding (the mapping and reset stages read it; docs/restore.md states it):

- five headers, appended after the record's own headers, in this order:
  ``x-kafka-backup-cluster``, ``x-kafka-backup-topic``, ``x-kafka-backup-partition``,
  ``x-kafka-backup-offset``, ``x-kafka-backup-timestamp``;
- cluster and topic are UTF-8 text; partition, offset and timestamp are ASCII
  decimal integers (``b"0"``, ``b"12345"``, ``b"1763780100000"``; ``b"-1"`` for a
  record without timestamp), so a console consumer shows them readably;
- any header of the record whose name starts with ``x-kafka-backup-`` (a backup of
  an already restored topic) is dropped first: a restored record carries exactly
  one set of origin headers, this restore's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

ORIGIN_HEADER_PREFIX = "x-kafka-backup-"
HEADER_CLUSTER = "x-kafka-backup-cluster"
HEADER_TOPIC = "x-kafka-backup-topic"
HEADER_PARTITION = "x-kafka-backup-partition"
HEADER_OFFSET = "x-kafka-backup-offset"
HEADER_TIMESTAMP = "x-kafka-backup-timestamp"
ORIGIN_HEADERS = (HEADER_CLUSTER, HEADER_TOPIC, HEADER_PARTITION, HEADER_OFFSET, HEADER_TIMESTAMP)

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Origin:
    """Where a restored record came from, as its origin headers say."""

    cluster: str
    topic: str
    partition: int
    offset: int
    timestamp: int


def encode_int(number: int) -> bytes:
    return b"%d" % number


def partition_headers(cluster: str, topic: str, partition: int) -> list[Header]:
    """The three origin headers that are the same for every record of one source partition."""
    return [
        (HEADER_CLUSTER, cluster.encode()),
        (HEADER_TOPIC, topic.encode()),
        (HEADER_PARTITION, encode_int(partition)),
    ]


def origin_headers(cluster: str, topic: str, partition: int, offset: int, timestamp: int) -> list[Header]:
    """All five origin headers of one record, in their order."""
    return [
        *partition_headers(cluster, topic, partition),
        (HEADER_OFFSET, encode_int(offset)),
        (HEADER_TIMESTAMP, encode_int(timestamp)),
    ]


def is_origin_header(name: str) -> bool:
    return name.startswith(ORIGIN_HEADER_PREFIX)


def without_origin_headers(headers: Iterable[Header]) -> list[Header]:
    """The record's own headers, in order, minus any ``x-kafka-backup-*`` (replaced on restore)."""
    return [header for header in headers if not header[0].startswith(ORIGIN_HEADER_PREFIX)]


def parse_origin(headers: Sequence[tuple[str, bytes | None]] | None) -> Origin | None:
    """The origin a restored record's headers carry, or None if they do not carry all five.

    If a name occurs more than once the last occurrence counts (restore appends its own last).
    """
    if not headers:
        return None
    found: dict[str, bytes] = {}
    for name, value in headers:
        if value is not None and name.startswith(ORIGIN_HEADER_PREFIX):
            found[name] = value
    if any(name not in found for name in ORIGIN_HEADERS):
        return None
    try:
        return Origin(
            cluster=found[HEADER_CLUSTER].decode(),
            topic=found[HEADER_TOPIC].decode(),
            partition=int(found[HEADER_PARTITION]),
            offset=int(found[HEADER_OFFSET]),
            timestamp=int(found[HEADER_TIMESTAMP]),
        )
    except (UnicodeDecodeError, ValueError):
        return None
