"""The mapping file: JSON in the shape users know, CSV, Parquet, text, and a reader that refuses damage."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kbackup.cli.mapping_text import parse_format, render
from kbackup.core.errors import (
    BackupIntegrityError,
    ConfigError,
    NotFoundError,
    PreconditionError,
    UsageError,
)
from kbackup.format.mapping_file import (
    OffsetMapping,
    ScannedPartition,
    read_mapping,
    write_mapping,
)
from kbackup.offsets.ranges import OffsetRange


def sample_mapping() -> OffsetMapping:
    return OffsetMapping(
        source_cluster="prod-us-east-1",
        ranges=[
            OffsetRange("orders", 0, "orders", 0, 12345, 15000, 100, 2755),
            OffsetRange("orders", 1, "orders", 1, 5000, 7500, 50, 2550),
            OffsetRange("payments", 0, "prod-payments", 0, 8000, 8000, 200, 200),
            OffsetRange("payments", 0, "prod-payments", 0, 8002, 8010, 202, 210),
        ],
        scanned=[
            ScannedPartition("orders", 0, 0, 2756),
            ScannedPartition("orders", 1, 0, 2551),
            ScannedPartition("prod-payments", 0, 0, 211),
            ScannedPartition("prod-payments", 1, 0, 0),
        ],
        created_at=datetime(2026, 11, 22, 3, 0, tzinfo=UTC),
        target_cluster_id="abc",
    )


def test_json_has_the_shape_users_know() -> None:
    document = json.loads(render(sample_mapping(), "json"))
    assert document["format"] == "kafka-backup-offset-mapping"
    assert document["format_version"] == 1
    assert document["source_cluster"] == "prod-us-east-1"
    assert document["created_at"] == "2026-11-22T03:00:00Z"
    orders = document["topics"][0]
    assert orders["topic"] == "orders"
    assert orders["target_topic"] == "orders"
    assert orders["source_cluster"] == "prod-us-east-1"
    assert orders["mappings"][0] == {
        "partition": 0,
        "target_partition": 0,
        "source_range": {"start": 12345, "end": 15000},
        "target_range": {"start": 100, "end": 2755},
    }
    payments = document["topics"][1]
    assert (payments["topic"], payments["target_topic"], len(payments["mappings"])) == (
        "payments",
        "prod-payments",
        2,
    )
    assert {"topic": "prod-payments", "partition": 1, "start_offset": 0, "end_offset": 0} in document[
        "scanned"
    ]


@pytest.mark.parametrize("output_format", ["json", "csv", "parquet"])
def test_every_file_format_reads_back_the_same_mapping(tmp_path: Path, output_format: str) -> None:
    mapping = sample_mapping()
    path = tmp_path / f"mapping.{output_format}"
    size = write_mapping(mapping, path, output_format)  # type: ignore[arg-type]
    assert size == path.stat().st_size > 0
    back = read_mapping(path, source_cluster="prod-us-east-1")
    assert back.ranges == mapping.ranges
    assert back.scanned == mapping.scanned
    assert back.created_at == mapping.created_at
    assert back.target_cluster_id == "abc"


def test_text_is_a_table_with_inclusive_ends() -> None:
    text = render(sample_mapping(), "text")
    assert "12345..15000" in text
    assert "100..2755" in text
    assert "2656" in text  # records of the first range
    assert "4 range(s)" in text
    assert "prod-payments[1] offsets 0 to 0" in text


def test_empty_mapping_round_trips(tmp_path: Path) -> None:
    mapping = OffsetMapping("c1", [], [ScannedPartition("t", 0, 0, 0)])
    write_mapping(mapping, tmp_path / "m.json", "json")
    assert read_mapping(tmp_path / "m.json").ranges == []
    assert "no restored records" in render(mapping, "text")


def test_parquet_needs_a_file_and_formats_are_checked() -> None:
    with pytest.raises(UsageError):
        render(sample_mapping(), "parquet")
    with pytest.raises(ConfigError, match=r"^--format xml: choose text, json, csv or parquet$"):
        parse_format("xml", None)
    assert parse_format(None, None) == "text"
    assert parse_format(None, "out.parquet") == "parquet"
    assert parse_format(None, "out.CSV") == "csv"
    assert parse_format(None, "out") == "json"
    assert parse_format("JSON", "out.csv") == "json"


def test_truncated_json_is_a_clear_integrity_error(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    text = render(sample_mapping(), "json")
    path.write_text(text[: len(text) // 2])
    with pytest.raises(
        BackupIntegrityError, match=r"m\.json is not a valid offset mapping: not JSON \(truncated\?\)"
    ):
        read_mapping(path)


def test_truncated_parquet_is_a_clear_integrity_error(tmp_path: Path) -> None:
    path = tmp_path / "m.parquet"
    write_mapping(sample_mapping(), path, "parquet")
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(BackupIntegrityError, match="not a readable Parquet file"):
        read_mapping(path)


def test_another_source_cluster_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    write_mapping(sample_mapping(), path, "json")
    with pytest.raises(PreconditionError, match="for source cluster 'prod-us-east-1', not 'dr-eu'"):
        read_mapping(path, source_cluster="dr-eu")


def test_missing_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        read_mapping(tmp_path / "absent.json")


def edited(tmp_path: Path, change: object) -> Path:
    document = sample_mapping().to_document()
    change(document)  # type: ignore[operator]
    path = tmp_path / "m.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format_version=2), "format version 2"),
        (lambda d: d.pop("scanned"), "scanned: Field required"),
        (
            lambda d: d["topics"][0]["mappings"][0]["target_range"].update(end=2754),
            "must be non-empty and of the same length",
        ),
        (lambda d: d["scanned"].pop(0), "which it never scanned"),
        (lambda d: d["scanned"][0].update(end_offset=2000), "lies outside the scanned offsets"),
        (lambda d: d["topics"][0].update(source_cluster="other"), "names source cluster 'other'"),
        (lambda d: d["topics"][0]["mappings"][0].update(partition="zero"), "partition"),
    ],
)
def test_damaged_documents_are_refused_with_the_reason(tmp_path: Path, change: object, message: str) -> None:
    with pytest.raises(BackupIntegrityError, match=message):
        read_mapping(edited(tmp_path, change))


def test_csv_with_a_bad_row_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    write_mapping(sample_mapping(), path, "csv")
    lines = path.read_text().splitlines()
    lines[3] = lines[3].replace("5000", "x5000", 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(BackupIntegrityError, match="range row 2"):
        read_mapping(path)


def test_lookup_and_positions_for_the_reset_stage() -> None:
    mapping = sample_mapping()
    # Inside a range, at its start, before it (the first restored record), past the end.
    assert [p.offset for p in mapping.lookup("orders", 0, 12400)] == [155]
    assert [p.offset for p in mapping.lookup("orders", 0, 0)] == [100]
    assert [p.offset for p in mapping.lookup("orders", 0, 20000)] == [2756]
    # A committed offset in a hole (8001) resumes at the next restored record.
    assert [p.offset for p in mapping.lookup("payments", 0, 8001)] == [202]
    assert mapping.lookup("absent", 0, 5) == []
    positions = mapping.target_positions({("orders", 0): 15000, ("orders", 1): 5000})
    assert {target: p.offset for target, p in positions.items()} == {("orders", 0): 2755, ("orders", 1): 50}
    assert mapping.source_end("orders", 0) == 15001
    assert mapping.scanned_end("prod-payments", 1) == 0
    assert mapping.target_position("prod-payments", 1, {}) is None
    assert mapping.records == 2656 + 2501 + 1 + 9


@pytest.mark.parametrize("name", ["0\r", "a\rb", "a\r\nb", 'q"\r'])
def test_csv_reads_back_a_name_holding_a_carriage_return(name: str) -> None:
    # Found by the hostile-parser fuzz test: the csv writer quotes a cell holding its own line end
    # ("\n") but not a lone "\r", which the reader then took for a line end.
    from kbackup.format.mapping_file import parse_mapping, render_csv

    mapping = OffsetMapping(
        source_cluster="prod",
        ranges=[
            OffsetRange(name, 0, "orders", 1, 100, 199, 0, 99),
            OffsetRange("plain", 0, name, 0, 5, 9, 0, 4),
        ],
        scanned=[ScannedPartition("orders", 1, 0, 100), ScannedPartition(name, 0, 0, 5)],
        created_at=datetime(2026, 11, 22, 3, 0, tzinfo=UTC),
    )
    text = render_csv(mapping)
    assert parse_mapping(text.encode(), "m.csv") == mapping
