"""Arbitrary and mutated input to every file parser: a KBackupError or a valid result, never a crash.

The parsers are the config loader, the offset-mapping reader (JSON, CSV,
Parquet) and the reset-plan reader. Each property starts from a valid file
and damages it (truncation, flipped bytes, a JSON value swapped for another
of any type) or feeds bytes with no structure at all; the only acceptable
outcomes are a parsed object or one of the project's errors (which the CLI
turns into one line and a documented exit code).
"""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kbackup.app import config as config_module
from kbackup.core.errors import EXIT_CODES, BackupIntegrityError, ConfigError, KBackupError
from kbackup.format.mapping_file import OffsetMapping, ScannedPartition, read_mapping, write_mapping
from kbackup.format.reset_plan import (
    GroupReset,
    PartitionOffsets,
    PartitionReset,
    ResetPlan,
    SourceOffsetsInfo,
    TargetInfo,
    read_plan,
)
from kbackup.offsets.ranges import OffsetRange

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


def _paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every location in a JSON tree (dict keys and list indexes), the root included."""
    found = [prefix]
    if isinstance(tree, dict):
        for key, value in tree.items():
            found.extend(_paths(value, (*prefix, key)))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            found.extend(_paths(value, (*prefix, index)))
    return found


def _replace(tree: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(tree, dict):
        return {**tree, head: _replace(tree[head], rest, value)}
    copy = list(tree)
    copy[head] = _replace(copy[head], rest, value)
    return copy


def _delete(tree: Any, path: tuple[Any, ...]) -> Any:
    if len(path) == 1:
        if isinstance(tree, dict):
            return {key: value for key, value in tree.items() if key != path[0]}
        return [value for index, value in enumerate(tree) if index != path[0]]
    head = path[0]
    if isinstance(tree, dict):
        return {**tree, head: _delete(tree[head], path[1:])}
    copy = list(tree)
    copy[head] = _delete(copy[head], path[1:])
    return copy


@st.composite
def mutated_trees(draw: st.DrawFn, original: Any) -> Any:
    """``original`` with one to three locations replaced by arbitrary JSON values or removed."""
    tree = original
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(_paths(tree)))
        if path and draw(st.booleans()):
            tree = _delete(tree, path)
        else:
            tree = _replace(tree, path, draw(json_values))
    return tree


@st.composite
def damaged_bytes(draw: st.DrawFn, original: bytes) -> bytes:
    """``original`` truncated, with bytes flipped, or with random bytes inserted."""
    data = bytearray(original)
    kind = draw(st.sampled_from(["truncate", "flip", "insert"]))
    if kind == "truncate":
        return bytes(data[: draw(st.integers(min_value=0, max_value=max(len(data) - 1, 0)))])
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        at = draw(st.integers(min_value=0, max_value=max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] ^= draw(st.integers(min_value=1, max_value=255))
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


def _must_be_project_error(call: Any) -> Any:
    """Run ``call``: a result, or a KBackupError with a documented exit code and a one-line first line."""
    try:
        return call()
    except KBackupError as error:
        caught = error
    assert caught.exit_code in EXIT_CODES, caught
    assert caught.message.strip(), "an error with no message"
    return caught


# -- the config loader ---------------------------------------------------------------------------

VALID_CONFIG: dict[str, Any] = {
    "mode": "restore",
    "backup_id": "nightly",
    "source": {
        "bootstrap_servers": ["127.0.0.1:9092"],
        "security": {"security_protocol": "SASL_SSL", "sasl_password": "pw-1234"},
        "properties": {"client.id": "x"},
        "topics": {"include": ["orders", "pay.*"], "exclude": ["__.*"]},
    },
    "target": {"bootstrap_servers": ["127.0.0.1:9093"]},
    "storage": {"url": "s3://bucket/prefix", "sse": "aws:kms", "sse_kms_key_id": "alias/k"},
    "backup": {"compression": "zstd", "segment_max_bytes": 1048576},
    "restore": {
        "topic_mapping": {"orders": "restored-orders"},
        "time_window_start": "2026-11-21T00:00:00Z",
        "time_window_end": 1800000000000,
        "offset_ranges": {"orders": {"0": {"start": 10, "end": 20}}},
        "partitions": {"orders": [0, 1]},
    },
    "offset_reset": {"groups": ["g1"]},
}


def _load_text(text: str) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        return _must_be_project_error(lambda: config_module.load(path))


def test_the_valid_config_loads() -> None:
    loaded = _load_text(yaml.safe_dump(VALID_CONFIG))
    assert isinstance(loaded, config_module.KBackupConfig), loaded


@FUZZ
@given(mutated_trees(VALID_CONFIG))
def test_mutated_config_is_loaded_or_refused_with_config_error(tree: Any) -> None:
    outcome = _load_text(json.dumps(tree, allow_nan=True))  # JSON is YAML
    assert isinstance(outcome, config_module.KBackupConfig | ConfigError), outcome


@FUZZ
@given(st.text(max_size=300))
def test_arbitrary_text_as_config_never_crashes(text: str) -> None:
    outcome = _load_text(text)
    assert isinstance(outcome, config_module.KBackupConfig | ConfigError), outcome


@FUZZ
@given(st.data())
def test_damaged_config_bytes_never_crash(data: st.DataObject) -> None:
    damaged = data.draw(damaged_bytes(yaml.safe_dump(VALID_CONFIG).encode()))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.yaml"
        path.write_bytes(damaged)
        outcome = _must_be_project_error(lambda: config_module.load(path))
    assert isinstance(outcome, config_module.KBackupConfig | ConfigError), outcome


# -- the offset-mapping reader -------------------------------------------------------------------


def _sample_mapping() -> OffsetMapping:
    return OffsetMapping(
        source_cluster="prod-us-east-1",
        ranges=[
            OffsetRange("orders", 0, "orders", 0, 100, 199, 0, 99),
            OffsetRange("orders", 1, "orders", 1, 5, 9, 0, 4),
        ],
        scanned=[ScannedPartition("orders", 0, 0, 100), ScannedPartition("orders", 1, 0, 5)],
        created_at=datetime(2026, 11, 22, 3, 0, tzinfo=UTC),
        target_cluster_id="target-id",
    )


def _mapping_bytes(output_format: str) -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"mapping.{output_format}"
        write_mapping(_sample_mapping(), path, output_format)  # type: ignore[arg-type]
        return path.read_bytes()


def _read_mapping_bytes(raw: bytes) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "mapping"
        path.write_bytes(raw)
        return _must_be_project_error(lambda: read_mapping(path, source_cluster="prod-us-east-1"))


@FUZZ
@given(st.data(), st.sampled_from(["json", "csv", "parquet"]))
def test_damaged_mapping_files_are_read_or_refused(data: st.DataObject, output_format: str) -> None:
    outcome = _read_mapping_bytes(data.draw(damaged_bytes(_mapping_bytes(output_format))))
    assert isinstance(outcome, OffsetMapping | KBackupError), outcome


@FUZZ
@given(mutated_trees(json.loads(_mapping_bytes("json"))))
def test_mutated_mapping_documents_are_read_or_refused(tree: Any) -> None:
    outcome = _read_mapping_bytes(json.dumps(tree).encode())
    assert isinstance(outcome, OffsetMapping | KBackupError), outcome
    if isinstance(outcome, OffsetMapping):
        # Whatever was accepted still obeys the reader's promises: ranges inside what was scanned.
        scanned = {(s.topic, s.partition): s for s in outcome.scanned}
        for item in outcome.ranges:
            bounds = scanned[item.target]
            assert bounds.start_offset <= item.target_start <= item.target_end < bounds.end_offset


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes_as_mapping_never_crash(raw: bytes) -> None:
    outcome = _read_mapping_bytes(raw)
    assert isinstance(outcome, OffsetMapping | KBackupError), outcome


def test_mapping_from_another_source_cluster_is_a_precondition_error(tmp_path: Path) -> None:
    path = tmp_path / "mapping.json"
    write_mapping(_sample_mapping(), path, "json")
    with pytest.raises(KBackupError) as caught:
        read_mapping(path, source_cluster="prod-eu-west-1")
    assert caught.value.exit_code == 10
    assert "prod-us-east-1" in caught.value.message


@pytest.mark.parametrize("huge", [2**63, 2**70, -1])
def test_mapping_offsets_outside_int64_are_refused(tmp_path: Path, huge: int) -> None:
    document = json.loads(_mapping_bytes("json"))
    document["topics"][0]["mappings"][0]["source_range"] = {"start": huge, "end": huge}
    document["topics"][0]["mappings"][0]["target_range"] = {"start": 0, "end": 0}
    path = tmp_path / "mapping.json"
    path.write_text(json.dumps(document))
    with pytest.raises(BackupIntegrityError, match="source_range"):
        read_mapping(path)


# -- the reset-plan reader -----------------------------------------------------------------------


def _sample_plan() -> ResetPlan:
    return ResetPlan(
        created_at="2026-11-22T03:00:00Z",
        tool_version="0.1.0",
        strategy="header-based",
        source=SourceOffsetsInfo(kind="backup", taken_at="2026-11-22T02:00:00Z", source_cluster="prod"),
        target=TargetInfo(cluster_id="target-id", bootstrap_servers=["127.0.0.1:9093"]),
        target_partitions=[PartitionOffsets(topic="orders", partition=0, log_start=0, log_end=100)],
        groups=[
            GroupReset(
                group_id="g1",
                partitions=[
                    PartitionReset(
                        target_topic="orders",
                        target_partition=0,
                        source_topic="orders",
                        source_committed={0: 150},
                        target_committed=None,
                        new_offset=50,
                        method="mapping",
                    )
                ],
            )
        ],
    )


def _read_plan_bytes(raw: bytes) -> Any:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "plan.json"
        path.write_bytes(raw)
        return _must_be_project_error(lambda: read_plan(path))


def test_the_sample_plan_reads_back() -> None:
    assert _read_plan_bytes(_sample_plan().to_json_bytes()) == _sample_plan()


@FUZZ
@given(st.data())
def test_damaged_plan_files_are_read_or_refused(data: st.DataObject) -> None:
    outcome = _read_plan_bytes(data.draw(damaged_bytes(_sample_plan().to_json_bytes())))
    assert isinstance(outcome, ResetPlan | ConfigError), outcome


@FUZZ
@given(mutated_trees(json.loads(_sample_plan().to_json_bytes())))
def test_mutated_plans_are_read_or_refused(tree: Any) -> None:
    outcome = _read_plan_bytes(json.dumps(tree).encode())
    assert isinstance(outcome, ResetPlan | ConfigError), outcome
    if isinstance(outcome, ResetPlan):
        for group in outcome.groups:
            for row in group.partitions:
                assert row.new_offset is None or 0 <= row.new_offset < 2**63


@pytest.mark.parametrize("offset", [-1, -2, 2**63, 2**70])
def test_plan_offsets_outside_kafka_range_are_refused(tmp_path: Path, offset: int) -> None:
    document = json.loads(_sample_plan().to_json_bytes())
    document["groups"][0]["partitions"][0]["new_offset"] = offset
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigError, match="new_offset"):
        read_plan(path)
