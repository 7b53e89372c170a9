"""The group history of an increment (docs/format.md, "Group history"): readings stored as changes
read back as the positions they were, plain and sealed; a changed, swapped or newer file refused in
one line; and which readings an increment stores (before its own snapshot, covered by its data)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbackup.backup.group_history import GroupHistoryRecorder, store_readings
from kbackup.backup.group_positions import describe_group_history
from kbackup.core.errors import BackupIntegrityError, EncryptionKeyError, NotFoundError, PreconditionError
from kbackup.format.encryption import BackupKeys
from kbackup.format.group_history import (
    GroupHistory,
    Positions,
    build_history,
    encode_group_history,
    group_history_key,
    parse_group_history,
    reference,
    replay,
)
from kbackup.format.manifest import ConsumerGroupsSnapshot, GroupOffset, GroupSnapshot, Manifest
from kbackup.storage import open_storage

DOC = (Path(__file__).parents[2] / "docs" / "format.md").read_text()
[EXAMPLE] = [
    block
    for block in re.findall(r"```json\n(.*?)\n```", DOC, re.DOTALL)
    if '"format": "kafka-backup-group-history"' in block
]
KEYS = BackupKeys("nightly", 1, "local:test", bytes(range(32)))
RUN = "20261127T101500Z-1a2b3c4d"
KEY = group_history_key(3, RUN, "5e6f7a8b")


def snapshot(taken_at: str, positions: Positions) -> ConsumerGroupsSnapshot:
    return ConsumerGroupsSnapshot(
        taken_at=taken_at,
        groups=[
            GroupSnapshot(
                group_id=group,
                offsets=[
                    GroupOffset(topic=t, partition=p, offset=o) for (t, p), o in sorted(offsets.items())
                ],
            )
            for group, offsets in sorted(positions.items())
        ],
    )


READINGS = [
    {"billing": {("orders", 0): 10, ("orders", 1): 7}, "audit": {("orders", 0): 3}},
    {"billing": {("orders", 0): 10, ("orders", 1): 9}, "audit": {("orders", 0): 3}},
    {"billing": {("orders", 0): 12, ("orders", 1): 9, ("payments", 0): 1}},  # audit deleted
    {"billing": {("orders", 0): 12, ("payments", 0): 1}, "audit": {("orders", 0): 0}},  # reset to 0
]
TIMES = [f"2026-11-27T10:14:{second:02d}.000Z" for second in (2, 12, 22, 32)]


def history(keys_increment: int = 3) -> GroupHistory:
    return build_history(
        [snapshot(t, p) for t, p in zip(TIMES, READINGS, strict=True)],
        backup_id="nightly",
        increment=keys_increment,
        run_id=RUN,
        interval_secs=10.0,
    )


def read(data: bytes, keys: BackupKeys | None = None, increment: int = 3) -> GroupHistory:
    return parse_group_history(
        data, reference(history(), KEY, data), backup_id="nightly", increment=increment, run_id=RUN, keys=keys
    )


def test_the_documented_example_reads_and_replays() -> None:
    documented = GroupHistory.model_validate_json(EXAMPLE)
    assert set(json.loads(EXAMPLE)) == set(GroupHistory.model_fields)
    assert [positions for _, positions in replay(documented)] == [
        {"billing": {("orders", 0): 1200, ("orders", 1): 1187}, "audit": {("orders", 0): 300}},
        {"billing": {("orders", 0): 1200, ("orders", 1): 1240}, "audit": {("orders", 0): 300}},
    ]


def test_readings_are_stored_as_changes_and_replay_to_what_was_read() -> None:
    built = history()
    assert [positions for _, positions in replay(built)] == READINGS
    assert [reading.taken_at for reading, _ in replay(built)] == TIMES
    first, second, third, fourth = built.readings
    assert len(first.changes) == 2  # the first reading of a file is whole
    [moved] = second.changes  # only billing's orders/1 moved
    assert (moved.group_id, moved.offsets, moved.removed) == ("billing", {"orders": {"1": 9}}, {})
    by_group = {change.group_id: change for change in third.changes}
    assert by_group["audit"].removed == {"orders": [0]}
    assert not by_group["audit"].offsets
    assert by_group["billing"].offsets == {"orders": {"0": 12}, "payments": {"0": 1}}
    by_group = {change.group_id: change for change in fourth.changes}
    assert by_group["billing"].removed == {"orders": [1]}
    assert by_group["audit"].offsets == {"orders": {"0": 0}}  # a rewind is a change like any other


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["a", "b", "c"]),
            st.dictionaries(st.tuples(st.sampled_from(["t", "u"]), st.integers(0, 3)), st.integers(0, 9)),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_any_sequence_of_readings_replays_exactly(readings: list[Positions]) -> None:
    times = [f"2026-11-27T10:00:{i:02d}.000Z" for i in range(len(readings))]
    built = build_history(
        [snapshot(t, p) for t, p in zip(times, readings, strict=True)],
        backup_id="b",
        increment=0,
        run_id=RUN,
        interval_secs=1.0,
    )
    expected = [{group: offsets for group, offsets in reading.items() if offsets} for reading in readings]
    assert [positions for _, positions in replay(built)] == expected
    # Round trip through the stored bytes too.
    data = encode_group_history(built, None)
    parsed = parse_group_history(
        data, reference(built, KEY, data), backup_id="b", increment=0, run_id=RUN, keys=None
    )
    assert parsed == built


@pytest.mark.parametrize("keys", [None, KEYS], ids=["plain", "sealed"])
def test_a_file_reads_back_as_written(keys: BackupKeys | None) -> None:
    data = encode_group_history(history(), keys)
    assert read(data, keys) == history()
    ref = reference(history(), KEY, data)
    assert (ref.readings, ref.first_taken_at, ref.last_taken_at, ref.interval_secs) == (
        4,
        TIMES[0],
        TIMES[-1],
        10.0,
    )
    if keys is not None:
        assert b"billing" not in data
        assert b"orders" not in data
        assert b'"increment": 3' in data


def test_a_file_changed_swapped_newer_or_without_its_key_is_refused() -> None:
    plain = encode_group_history(history(), None)
    sealed = encode_group_history(history(), KEYS)
    with pytest.raises(BackupIntegrityError, match="does not match its manifest"):
        parse_group_history(
            plain.replace(b'"0":10', b'"0":11'),
            reference(history(), KEY, plain),
            backup_id="nightly",
            increment=3,
            run_id=RUN,
            keys=None,
        )
    other = encode_group_history(history(keys_increment=4), None)
    with pytest.raises(BackupIntegrityError, match="belongs to backup nightly increment 4"):
        parse_group_history(
            other, reference(history(), KEY, other), backup_id="nightly", increment=3, run_id=RUN, keys=None
        )
    with pytest.raises(BackupIntegrityError, match="fails authentication"):
        read(sealed, KEYS, increment=2)
    with pytest.raises(EncryptionKeyError, match="is encrypted"):
        read(sealed)
    with pytest.raises(BackupIntegrityError, match="not encrypted, in a backup that is"):
        read(plain, KEYS)
    newer = json.loads(plain)
    newer["format_version"] = 2
    data = json.dumps(newer).encode()
    with pytest.raises(BackupIntegrityError, match="this kafka-backup reads versions up to 1") as caught:
        read(data)
    assert "\n" not in caught.value.message


def recorder(readings: list[ConsumerGroupsSnapshot]) -> GroupHistoryRecorder:
    made = GroupHistoryRecorder(lambda topics: snapshot("x", {}), 1.0)
    made.pending = list(readings)
    return made


def test_a_full_increment_stores_the_readings_taken_before_its_own_snapshot() -> None:
    readings = [snapshot(t, p) for t, p in zip(TIMES, READINGS, strict=True)]
    made = recorder(readings)
    own = snapshot("2026-11-27T10:14:20.000Z", READINGS[1])
    chosen = made.for_increment(own, {}, partial=False)
    assert chosen == readings[:2]
    made.stored(chosen)
    assert made.pending == readings[2:]  # taken after its end offsets were read: the next increment's


def test_a_stopped_increment_stores_only_the_readings_its_data_covers() -> None:
    readings = [snapshot(t, p) for t, p in zip(TIMES, READINGS, strict=True)]
    ends = {("orders", 0): 11, ("orders", 1): 9, ("payments", 0): 5}
    # The third reading has billing at orders/0 offset 12, beyond the 11 copied before the stop.
    assert recorder(readings).for_increment(None, ends, partial=True) == readings[:2]
    own = snapshot(TIMES[1], READINGS[1])
    assert recorder(readings).for_increment(own, ends, partial=True) == readings[:1]


def test_a_failed_reading_is_a_gap_said_once_never_a_stop(caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    def take(topics: list[str]) -> ConsumerGroupsSnapshot:
        calls.append(topics)
        if len(calls) % 2:
            raise BackupIntegrityError("no answer")  # any project error
        return snapshot(TIMES[0], READINGS[0])

    made = GroupHistoryRecorder(take, 0.0)
    made.checkpoint(["orders"])
    for _ in range(4):
        made.tick()
    assert len(calls) == 4
    assert len(made.pending) == 2
    assert sum("a reading of the group history failed" in r.message for r in caplog.records) == 1


def test_describe_shows_one_group_over_the_history_and_the_increments_snapshots(tmp_path: Path) -> None:
    from kbackup.sandbox.synthetic_backup import BackupBuilder

    storage = open_storage(str(tmp_path / "store"))
    (tmp_path / "scratch").mkdir()
    builder = BackupBuilder(storage, "b", source_cluster="src", scratch_dir=tmp_path / "scratch")
    builder.topic("orders", 2)
    builder.partition_rows("orders", 0, ((i, 1_700_000_000_000, 0, None, b"v", []) for i in range(20)))
    builder.partition_rows("orders", 1, ((i, 1_700_000_000_000, 0, None, b"v", []) for i in range(20)))
    manifest = builder.commit(tool_version="test")
    readings = [snapshot(t, p) for t, p in zip(TIMES, READINGS, strict=True)]
    ref = store_readings(
        storage,
        readings[:3],
        backup_id="b",
        increment=0,
        run_id=manifest.run_id,
        interval_secs=10.0,
        keys=None,
    )
    own = snapshot(TIMES[3], READINGS[3])
    _rewrite_manifest(tmp_path, manifest.model_copy(update={"group_history": ref, "consumer_groups": own}))
    info = describe_group_history(storage, "b", "audit")
    assert info["interval_secs"] == 10.0
    assert info["readings"] == 4
    assert [(row["first_seen"], row["source"], row["offsets"]) for row in info["positions"]] == [
        (TIMES[0], "history", [{"topic": "orders", "partition": 0, "offset": 3}]),
        (TIMES[2], "history", []),
        (TIMES[3], "increment", [{"topic": "orders", "partition": 0, "offset": 0}]),
    ]
    assert info["positions"][0]["last_seen"] == TIMES[1]
    assert info["positions"][0]["readings"] == 2
    with pytest.raises(
        NotFoundError, match="holds no committed offset of group nobody in any of its 4 reading"
    ):
        describe_group_history(storage, "b", "nobody")


def _rewrite_manifest(root: Path, manifest: Manifest) -> None:
    """The test's own manifest in place of the builder's (a plain backup's manifest is plain JSON)."""
    path = root / "store" / "b" / "manifests" / f"{manifest.increment:08d}.json"
    path.write_bytes(manifest.to_json_bytes())


def test_the_position_as_of_a_moment_is_of_the_last_reading_finished_by_then(tmp_path: Path) -> None:
    """A reading that began before the moment but ended after it may hold a commit made after the
    moment: the position of then is of the last reading *finished* by then (never a later one)."""
    from kbackup.format.catalog import BackupCatalog
    from kbackup.reset.sources import from_backup_as_of
    from kbackup.sandbox.synthetic_backup import BackupBuilder

    storage = open_storage(str(tmp_path / "store"))
    (tmp_path / "scratch").mkdir()
    builder = BackupBuilder(storage, "b", source_cluster="src", scratch_dir=tmp_path / "scratch")
    builder.topic("orders", 1)
    builder.partition_rows("orders", 0, ((i, 1_700_000_000_000, 0, None, b"v", []) for i in range(20)))
    manifest = builder.commit(tool_version="test")

    def reading(second: int, finished_ms: int, offset: int) -> ConsumerGroupsSnapshot:
        taken = snapshot(f"2026-11-27T10:14:{second:02d}.000Z", {"billing": {("orders", 0): offset}})
        return taken.model_copy(update={"finished_at": f"2026-11-27T10:14:{second:02d}.{finished_ms:03d}Z"})

    readings = [reading(2, 300, 10), reading(12, 400, 11), reading(22, 200, 12)]
    ref = store_readings(
        storage, readings, backup_id="b", increment=0, run_id=manifest.run_id, interval_secs=10.0, keys=None
    )
    own = reading(32, 100, 13)
    _rewrite_manifest(tmp_path, manifest.model_copy(update={"group_history": ref, "consumer_groups": own}))
    backup = BackupCatalog(storage).load("b")

    def as_of(moment: str) -> tuple[int, str]:
        found = from_backup_as_of(backup, storage, datetime.fromisoformat(moment))
        assert found.info.precision_secs == 10.0
        return found.groups["billing"][("orders", 0)], found.info.taken_at

    # During the second reading: the first one's position.
    assert as_of("2026-11-27T10:14:12.200Z") == (10, "2026-11-27T10:14:02.000Z")
    assert as_of("2026-11-27T10:14:12.399Z") == (10, "2026-11-27T10:14:02.000Z")
    assert as_of("2026-11-27T10:14:12.400Z") == (11, "2026-11-27T10:14:12.000Z")  # just finished
    assert as_of("2026-11-27T10:14:32.100Z") == (13, "2026-11-27T10:14:32.000Z")  # the increment's own
    assert as_of("2026-11-27T10:14:42.100Z") == (13, "2026-11-27T10:14:32.000Z")  # an interval after
    with pytest.raises(PreconditionError, match="is before backup b's first reading of the groups"):
        as_of("2026-11-27T10:14:02.299Z")
    with pytest.raises(PreconditionError, match="is after backup b's last reading of the groups"):
        as_of("2026-11-27T10:14:42.101Z")
