"""The MirrorMaker 2 model against Kafka's documented behaviour and the seeds' worked examples."""

from __future__ import annotations

from bench.accuracy.mm2_model import (
    DocumentedSyncStore,
    OffsetSync,
    OffsetSyncStore,
    PartitionSyncEmitter,
    doubling_store,
    mirror,
)

MILLION = 1_000_000


def identity_mirror(count: int, downstream_shift: int = 0) -> OffsetSyncStore:
    return mirror((u, u + downstream_shift) for u in range(count + 1))


def rereads(store: OffsetSyncStore | DocumentedSyncStore, upstream: int, downstream_shift: int = 0) -> int:
    """Records the group re-reads: the true position minus MM2's translation."""
    translated = store.translate(upstream)
    assert translated is not None
    assert translated >= 0
    return (upstream + downstream_shift) - translated


def test_emission_follows_offset_lag_max() -> None:
    emitter = PartitionSyncEmitter(offset_lag_max=100)
    emitted = [u for u in range(1000) if emitter.record_mirrored(u, u) is not None]
    # The first record, then every record 100 past the last sync's successor.
    assert emitted == [0, 101, 202, 303, 404, 505, 606, 707, 808, 909]


def test_holes_upstream_emit_a_sync() -> None:
    emitter = PartitionSyncEmitter()
    assert emitter.record_mirrored(0, 0) is not None
    assert emitter.record_mirrored(1, 1) is None
    assert emitter.record_mirrored(5, 2) is not None  # upstream skipped 2-4 (e.g. compaction)


def test_bucket_example_from_the_kafka_source() -> None:
    # OffsetSyncStore's comment: after a, b, c, d, e the state keeps a, c, d, e at growing spacing
    # (b is dropped: it falls in the same bucket as c). Newest first.
    store = OffsetSyncStore()
    for upstream in (0, 40, 70, 84, 91):
        store.add(OffsetSync(upstream, upstream))
    assert [sync.upstream for sync in store.kept()] == [91, 84, 70, 0]


def test_head_of_the_log_translates_exactly() -> None:
    store = identity_mirror(MILLION, downstream_shift=-100_000)
    assert rereads(store, MILLION, downstream_shift=-100_000) == 0


def test_seed_002_worked_example_row_by_row() -> None:
    # Seed 002: 1,000,000 records mirrored, targets 100,000 lower, syncs 100, 200, 400... apart.
    store = doubling_store(MILLION, 900_000)
    rows = {  # source offset: (translated target offset, re-reads)
        1_000_000: (900_000, 0),
        999_890: (899_701, 189),
        999_650: (899_301, 349),
        999_200: (898_501, 699),
        998_400: (896_901, 1_499),
        996_800: (893_701, 3_099),
        993_600: (887_301, 6_299),
        987_200: (874_501, 12_699),
        974_400: (848_901, 25_499),
        948_800: (797_701, 51_099),
        897_600: (695_301, 102_299),
        795_200: (490_501, 204_699),
        590_400: (80_901, 409_499),
    }
    for source_offset, (translated, rereads_expected) in rows.items():
        assert store.translate(source_offset) == translated, source_offset
        assert (source_offset - 100_000) - translated == rereads_expected, source_offset
    # The seed's first data row says 99 re-reads for 999,999; its own columns give 899,999 - 899,901 = 98.
    assert store.translate(999_999) == 899_901


def test_seed_000_worked_examples() -> None:
    # Seed 000's illustrative store: A=1000000, B=999900, C=999800, D=999600, E=999200, ... K=921600,
    # L=819200, M=614400, N=409600, ... Z=0 (targets equal to sources for simplicity).
    kept = [1_000_000, 999_900, 999_800, 999_600, 999_200, 921_600, 819_200, 614_400, 409_600, 0]
    store = DocumentedSyncStore([OffsetSync(u, u) for u in kept])
    assert store.translate(999_900) == 999_900  # exact match
    assert store.translate(999_250) == 999_200 + 1  # "translated to E + 1", worst case 400 re-reads
    assert 999_600 - (store.translate(999_599) or 0) <= 400
    assert store.translate(420_000) == 409_600 + 1  # "translated to N + 1"
    assert 614_399 - (store.translate(614_399) or 0) <= 204_800  # "up to 204800 records off"


def test_real_store_degrades_faster_than_documented() -> None:
    # Kafka's bucketed store (3.5+) keeps syncs at power-of-two boundaries, not at doubling gaps from
    # the head, so moderately lagging groups can re-read far more than the documentation suggests.
    real = identity_mirror(MILLION)
    documented = doubling_store(MILLION, MILLION)
    assert len(real.kept()) < len(documented.kept())
    assert rereads(real, 999_250) > 10 * rereads(documented, 999_250)
    assert max(rereads(real, u) for u in range(0, MILLION, 997)) <= 530_000


def test_never_skips_records() -> None:
    store = identity_mirror(200_000, downstream_shift=7)
    assert all(rereads(store, u, downstream_shift=7) >= 0 for u in range(0, 200_001, 13))


def test_no_syncs_means_untranslated() -> None:
    assert OffsetSyncStore().translate(5) is None
