"""The ``target`` and ``restore`` sections of a config file."""

from __future__ import annotations

from pydantic import Field

from kbackup.core.config import KafkaConnection, StrictModel


class RestoreSettings(StrictModel):
    """How a backup is replayed (keys follow the seed tool's ``restore:`` section)."""

    #: Stamp x-kafka-backup-* origin headers on every restored record.
    include_original_offset_header: bool = True
    #: Rename topics: ``{source_topic: target_topic}``.
    topic_mapping: dict[str, str] = Field(default_factory=dict)
    create_topics: bool = True
    copy_topic_configs: bool = True


TargetSettings = KafkaConnection
