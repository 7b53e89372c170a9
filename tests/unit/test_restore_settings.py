"""The restore section of a config file: keys users expect, and one clear line per mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.app import config as config_module
from kbackup.core.errors import ConfigError


def load(tmp_path: Path, text: str) -> config_module.KBackupConfig:
    path = tmp_path / "restore.yaml"
    path.write_text(text)
    return config_module.load(path)


def test_full_restore_section_loads(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        """
mode: restore
backup_id: nightly
target:
  bootstrap_servers: ["127.0.0.1:9093"]
restore:
  include_original_offset_header: true
  topic_mapping: {orders: restored-orders}
  topics: ["orders", "pay.*"]
  partitions: {orders: [0, 2]}
  partition_mapping: {orders: {2: 0}}
  repartition: [payments]
  target_partitions: {payments: 6}
  time_window_start: "2026-11-22T00:00:00Z"
  time_window_end: 1795392000000
  offset_ranges: {orders: {0: {start: 100, end: 200}, 2: {start: 5}}}
  exactly_once: auto
  transaction_max_records: 10000
  transaction_max_ms: 500
  verify_checksums: false
  producer_properties: {linger.ms: "50"}
""",
    )
    restore = cfg.restore
    assert restore.topic_mapping == {"orders": "restored-orders"}
    assert restore.partition_mapping == {"orders": {2: 0}}
    assert restore.repartitions("payments")
    assert not restore.repartitions("orders")
    assert restore.time_window_start == 1795305600000
    assert restore.time_window_end == 1795392000000
    assert restore.offset_ranges["orders"][0].start == 100
    assert restore.offset_ranges["orders"][2].end is None
    assert restore.exactly_once == "auto"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            "time_window_start: next tuesday",
            "restore.time_window_start: expected epoch milliseconds",
        ),
        (
            "time_window_start: 10\n  time_window_end: 5",
            "time_window_end (5) must be after time_window_start (10)",
        ),
        ("topic_mapping: {orders: 'bad name'}", "'bad name' is not a valid Kafka topic name"),
        ("offset_ranges: {orders: {0: {start: 9, end: 3}}}", "end 3 is below start 9"),
        ("exactly_once: sometimes", "restore.exactly_once"),
        ("topics: ['(']", "invalid regular expression"),
        ("partitions: {orders: []}", "expected a non-empty list"),
        (
            "include_original_offset_headers: true",
            "unknown key (did you mean 'include_original_offset_header'?)",
        ),
    ],
)
def test_mistakes_name_the_key(tmp_path: Path, section: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, f"restore:\n  {section}\n")
    assert message in caught.value.message
    assert caught.value.message.startswith(str(tmp_path / "restore.yaml"))


def test_defaults() -> None:
    restore = config_module.KBackupConfig().restore
    assert restore.include_original_offset_header is None  # as the backup says
    assert restore.exactly_once == "auto"
    assert restore.create_topics
    assert restore.copy_topic_configs
    assert restore.verify_checksums
    assert restore.progress_topic == "kafka-backup.restore-progress"
