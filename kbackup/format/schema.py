"""The one Parquet schema of backed-up records. Explicit, never inferred.

``docs/format.md`` carries the same schema as a table; a test keeps the two in
step. Changing a column means a new ``FORMAT_VERSION``.
"""

from __future__ import annotations

import pyarrow as pa

FORMAT_NAME = "kafka-backup"
#: Readers refuse manifests and segments with a higher version than this.
FORMAT_VERSION = 1

#: Kafka's own TimestampType ids (not confluent-kafka's, which are shifted by one).
TIMESTAMP_TYPE_NONE = -1
TIMESTAMP_TYPE_CREATE_TIME = 0
TIMESTAMP_TYPE_LOG_APPEND_TIME = 1

HEADER_TYPE = pa.struct(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("value", pa.binary(), nullable=True),
    ]
)

RECORD_SCHEMA = pa.schema(
    [
        pa.field("source_cluster", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("timestamp_type", pa.int8(), nullable=False),
        pa.field("key", pa.binary(), nullable=True),
        pa.field("value", pa.binary(), nullable=True),
        pa.field("headers", pa.list_(pa.field("header", HEADER_TYPE, nullable=False)), nullable=False),
    ],
    metadata={
        b"kafka-backup.format": FORMAT_NAME.encode(),
        b"kafka-backup.format_version": str(FORMAT_VERSION).encode(),
    },
)

#: What each column holds; rendered into the schema table of docs/format.md.
COLUMN_DESCRIPTIONS = {
    "source_cluster": (
        "Origin cluster id (`backup.source_cluster_id`, else the Kafka cluster id); "
        "same in every row of a backup."
    ),
    "topic": "Origin topic.",
    "partition": "Origin partition.",
    "offset": (
        "Origin offset. Strictly increasing within a segment; holes (compaction, transaction markers, "
        "aborted records) are kept as they were."
    ),
    "timestamp": "Record timestamp, ms since the Unix epoch (-1 if the record had none).",
    "timestamp_type": "Kafka's timestamp type: 0 CreateTime, 1 LogAppendTime, -1 none.",
    "key": "Record key bytes; null for a null key.",
    "value": "Record value bytes; null for a null value (a tombstone).",
    "headers": "Record headers in their original order, duplicates kept; a header value may be null.",
}


def confluent_to_kafka_timestamp_type(confluent_type: int) -> int:
    """confluent-kafka reports 0 none, 1 CreateTime, 2 LogAppendTime; Kafka uses -1, 0, 1."""
    return confluent_type - 1


def arrow_type_name(data_type: pa.DataType) -> str:
    """The type as written in docs/format.md, e.g. ``list<struct<key: string not null, value: binary>>``."""
    if pa.types.is_list(data_type):
        item = data_type.value_field
        return f"list<{arrow_type_name(item.type)}{'' if item.nullable else ' not null'}>"
    if pa.types.is_struct(data_type):
        parts = [
            f"{data_type.field(i).name}: {arrow_type_name(data_type.field(i).type)}"
            + ("" if data_type.field(i).nullable else " not null")
            for i in range(data_type.num_fields)
        ]
        return "struct<" + ", ".join(parts) + ">"
    return str(data_type)
