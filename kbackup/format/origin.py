"""The origin headers restore stamps on every record, and reading them back.

The one definition of the header contract; restore writes it, the mapping,
reset and drill stages read it, and docs/restore.md states it:

- five headers, appended after the record's own headers, in this order:
  ``x-kafka-backup-cluster``, ``x-kafka-backup-topic``, ``x-kafka-backup-partition``,
  ``x-kafka-backup-offset``, ``x-kafka-backup-timestamp``;
- cluster and topic are UTF-8 text; partition, offset and timestamp are ASCII
  decimal integers (``b"0"``, ``b"12345"``, ``b"1763780100000"``; ``b"-1"`` for a
  record without timestamp), so a console consumer with ``print.headers=true``
  shows them readably;
- any header of the record whose name starts with ``x-kafka-backup-`` (a backup of
  an already restored topic) is dropped first: a restored record carries exactly
  one set of origin headers, this restore's. Readers still let the last
  occurrence of a name win, for topics written by other tools.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

ORIGIN_HEADER_PREFIX = "x-kafka-backup-"
CLUSTER_HEADER = "x-kafka-backup-cluster"
TOPIC_HEADER = "x-kafka-backup-topic"
PARTITION_HEADER = "x-kafka-backup-partition"
OFFSET_HEADER = "x-kafka-backup-offset"
TIMESTAMP_HEADER = "x-kafka-backup-timestamp"
ORIGIN_HEADERS = (CLUSTER_HEADER, TOPIC_HEADER, PARTITION_HEADER, OFFSET_HEADER, TIMESTAMP_HEADER)

Header = tuple[str, bytes | None]
#: Headers as clients hand them over (confluent-kafka types values as str | bytes | None).
AnyHeaders = Sequence[tuple[str, str | bytes | None]]


class Origin(NamedTuple):
    """Where a restored record came from, as its origin headers say.

    A named tuple, not a frozen dataclass: one is built per record a reset probe reads,
    and a tuple is built several times faster."""

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
        (CLUSTER_HEADER, cluster.encode()),
        (TOPIC_HEADER, topic.encode()),
        (PARTITION_HEADER, encode_int(partition)),
    ]


def origin_headers(origin: Origin) -> list[Header]:
    """All five origin headers of one record, in their order."""
    return [
        *partition_headers(origin.cluster, origin.topic, origin.partition),
        (OFFSET_HEADER, encode_int(origin.offset)),
        (TIMESTAMP_HEADER, encode_int(origin.timestamp)),
    ]


def stamp_batch(
    cluster: str,
    topic: str,
    partition: int,
    offsets: Sequence[int],
    timestamps: Sequence[int],
    own: Sequence[Sequence[Header]] | None = None,
) -> list[list[Header]]:
    """Each record's headers as restore produces them: its own minus any ``x-kafka-backup-*``, then
    the five origin headers. One call per batch of one source partition (restore's hot path: the
    header lists are built in one comprehension, not by a call per record)."""
    cluster_header, topic_header, partition_header = partition_headers(cluster, topic, partition)
    if own is None:
        return [
            [
                cluster_header,
                topic_header,
                partition_header,
                (OFFSET_HEADER, b"%d" % offset),
                (TIMESTAMP_HEADER, b"%d" % timestamp),
            ]
            for offset, timestamp in zip(offsets, timestamps, strict=True)
        ]
    return [
        [
            *without_origin_headers(headers),
            cluster_header,
            topic_header,
            partition_header,
            (OFFSET_HEADER, b"%d" % offset),
            (TIMESTAMP_HEADER, b"%d" % timestamp),
        ]
        for offset, timestamp, headers in zip(offsets, timestamps, own, strict=True)
    ]


def is_origin_header(name: str) -> bool:
    return name.startswith(ORIGIN_HEADER_PREFIX)


def without_origin_headers(headers: Iterable[Header]) -> list[Header]:
    """The record's own headers, in order, minus any ``x-kafka-backup-*`` (replaced on restore)."""
    return [header for header in headers if not is_origin_header(header[0])]


def parse_origin(headers: AnyHeaders | None) -> Origin | None:
    """The origin a record's headers name, or None if any of the five is missing or malformed.

    If a name occurs more than once the last occurrence counts (restore appends its own last).
    """
    if not headers:
        return None
    # Fast path, the usual case: each origin header once or more, every value bytes (dict()
    # keeps the last of each name, as the rule says). Anything else takes the full path below.
    try:
        last = dict(headers)
        cluster, topic = last[CLUSTER_HEADER], last[TOPIC_HEADER]
        partition, offset, timestamp = last[PARTITION_HEADER], last[OFFSET_HEADER], last[TIMESTAMP_HEADER]
        if type(cluster) is type(topic) is type(partition) is type(offset) is type(timestamp) is bytes:
            return Origin(cluster.decode(), topic.decode(), int(partition), int(offset), int(timestamp))
    except (KeyError, ValueError, UnicodeDecodeError, TypeError):
        pass
    found: dict[str, bytes] = {}
    for name, value in headers:
        if value is not None and is_origin_header(name):
            found[name] = value.encode() if isinstance(value, str) else value
    try:
        return Origin(
            cluster=found[CLUSTER_HEADER].decode(),
            topic=found[TOPIC_HEADER].decode(),
            partition=int(found[PARTITION_HEADER]),
            offset=int(found[OFFSET_HEADER]),
            timestamp=int(found[TIMESTAMP_HEADER]),
        )
    except (KeyError, ValueError, UnicodeDecodeError):
        return None
