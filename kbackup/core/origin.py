"""The origin headers restore stamps on every record, and reading them back.

Values are text: the cluster id and topic as UTF-8, numbers as ASCII decimal,
so a console consumer with ``print.headers=true`` shows them readably. They
come after the record's own headers; if a record carries a header of the
same name more than once (a backup of a restored topic), the last one wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

HEADER_PREFIX = "x-kafka-backup-"
CLUSTER_HEADER = "x-kafka-backup-cluster"
TOPIC_HEADER = "x-kafka-backup-topic"
PARTITION_HEADER = "x-kafka-backup-partition"
OFFSET_HEADER = "x-kafka-backup-offset"
TIMESTAMP_HEADER = "x-kafka-backup-timestamp"
ORIGIN_HEADERS = (CLUSTER_HEADER, TOPIC_HEADER, PARTITION_HEADER, OFFSET_HEADER, TIMESTAMP_HEADER)

Header = tuple[str, bytes | None]
#: Headers as clients hand them over (confluent-kafka types values as str | bytes | None).
AnyHeaders = Sequence[tuple[str, str | bytes | None]]


@dataclass(frozen=True)
class Origin:
    """Where a restored record came from."""

    cluster: str
    topic: str
    partition: int
    offset: int
    timestamp: int


def origin_headers(origin: Origin) -> list[Header]:
    return [
        (CLUSTER_HEADER, origin.cluster.encode()),
        (TOPIC_HEADER, origin.topic.encode()),
        (PARTITION_HEADER, str(origin.partition).encode()),
        (OFFSET_HEADER, str(origin.offset).encode()),
        (TIMESTAMP_HEADER, str(origin.timestamp).encode()),
    ]


def parse_origin(headers: AnyHeaders | None) -> Origin | None:
    """The origin a record's headers name, or None if any of the five is missing or malformed."""
    if not headers:
        return None
    found: dict[str, bytes] = {}
    for key, value in headers:
        if key.startswith(HEADER_PREFIX) and value is not None:
            found[key] = (
                value.encode() if isinstance(value, str) else value
            )  # later headers of the same name win
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
