"""A faithful model of MirrorMaker 2's offset-sync translation, for the accuracy study.

It follows Apache Kafka's own rules (connect/mirror, Kafka 3.5 and later):

- Emission (``OffsetSyncWriter.PartitionState.update``): for each mirrored
  record (upstream offset u, downstream offset d) a sync is emitted at once
  when there was none yet, when ``d - (last_sync_d + 1) >= offset.lag.max``,
  when the upstream skipped an offset (a hole: compaction, markers), or when
  the downstream went backwards. Otherwise the record's sync is held as
  "delayed" and only sent at the task's next periodic offset commit.
- Retention (``OffsetSyncStore.updateSyncArray``): 64 slots; slot 0 is the
  latest sync; slot i is replaced by a new sync only while the new and old
  upstream offsets differ in a bit above bit i (buckets of size 2^i), so
  older syncs are kept with exponential spacing. This is the bucket rule of
  Kafka 3.5.0; later releases keep the syncs under other invariants
  (``invariantB``/``invariantC`` in ``updateSyncArray``), which this model
  does not follow: the study's MM2 figures are those of the bucket rule.
- Translation (``OffsetSyncStore.translateDownstream``): take the latest
  kept sync with upstream <= the group's offset; the result is its
  downstream offset, plus 1 unless the group's offset equals the sync's
  upstream offset exactly. If every kept sync is ahead of the group's offset,
  the answer is -1 (too old to translate).

The model is checked against the worked examples in the seeds (000: a
lagging group re-reads at most ~400 records near the head and up to 204,800
around offset 420,000 after 1,000,000 records; 002: the same exponential
degradation) in tests/unit/test_mm2_model.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

SLOTS = 64
DEFAULT_OFFSET_LAG_MAX = 100
_LONG_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class OffsetSync:
    upstream: int
    downstream: int


class PartitionSyncEmitter:
    """MirrorSourceTask's per-partition decision to emit an offset sync."""

    def __init__(self, offset_lag_max: int = DEFAULT_OFFSET_LAG_MAX) -> None:
        self.offset_lag_max = offset_lag_max
        self.previous_upstream = -1
        self.previous_downstream = -1
        self.last_sync_downstream = -1
        self.delayed: OffsetSync | None = None

    def record_mirrored(self, upstream: int, downstream: int) -> OffsetSync | None:
        """The sync emitted right away for this record, if any (else it is held as delayed)."""
        emit = (
            self.last_sync_downstream == -1
            or downstream - (self.last_sync_downstream + 1) >= self.offset_lag_max
            or upstream - self.previous_upstream != 1
            or downstream < self.previous_downstream
        )
        if emit:
            self.last_sync_downstream = downstream
        self.previous_upstream = upstream
        self.previous_downstream = downstream
        sync = OffsetSync(upstream, downstream)
        if emit:
            self.delayed = None
            return sync
        self.delayed = sync
        return None

    def commit(self) -> OffsetSync | None:
        """The periodic offset commit sends the delayed sync, if one is held."""
        sync, self.delayed = self.delayed, None
        return sync


class OffsetSyncStore:
    """MirrorCheckpointTask's in-memory store of one partition's syncs."""

    def __init__(self) -> None:
        self.syncs: list[OffsetSync] | None = None

    def add(self, sync: OffsetSync) -> None:
        if self.syncs is None or self.syncs[0].upstream > sync.upstream:
            self.syncs = [sync] * SLOTS
            return
        self.syncs[0] = sync
        for index in range(1, SLOTS):
            old = self.syncs[index]
            mask = (_LONG_MAX << index) & _LONG_MAX
            if (old.upstream ^ sync.upstream) & mask:
                self.syncs[index] = sync
            else:
                break

    def kept(self) -> list[OffsetSync]:
        """The distinct syncs kept, newest first."""
        seen: list[OffsetSync] = []
        for sync in self.syncs or []:
            if not seen or seen[-1] != sync:
                seen.append(sync)
        return seen

    def translate(self, upstream_offset: int) -> int | None:
        """The downstream offset MM2 checkpoints for a group at ``upstream_offset``.

        None: no sync at all (untranslated); -1: every kept sync is ahead (too old).
        """
        if self.syncs is None:
            return None
        oldest = self.syncs[-1]
        chosen = oldest
        if oldest.upstream <= upstream_offset:
            chosen = next(sync for sync in self.syncs if sync.upstream <= upstream_offset)
        if chosen.upstream > upstream_offset:
            return -1
        return chosen.downstream + (0 if chosen.upstream == upstream_offset else 1)


def mirror(
    pairs: Iterable[tuple[int, int]],
    *,
    offset_lag_max: int = DEFAULT_OFFSET_LAG_MAX,
    commit_every: int | None = None,
) -> OffsetSyncStore:
    """Mirror records (upstream, downstream) in order and return the checkpoint side's store.

    ``commit_every``: the source task commits (sending its delayed sync) every
    that many records; it always commits once at the end, as a running task does
    within ``offset.flush.interval.ms``.
    """
    emitter = PartitionSyncEmitter(offset_lag_max)
    store = OffsetSyncStore()
    for count, (upstream, downstream) in enumerate(pairs, start=1):
        sync = emitter.record_mirrored(upstream, downstream)
        if sync is not None:
            store.add(sync)
        if commit_every and count % commit_every == 0:
            delayed = emitter.commit()
            if delayed is not None:
                store.add(delayed)
    final = emitter.commit()
    if final is not None:
        store.add(final)
    return store


class DocumentedSyncStore:
    """MM2 as its documentation and KIP describe it: a fixed list of kept syncs, newest first.

    The seeds' worked examples use idealized stores (seed 002: gaps of 100,
    200, 400, ... below the head). Translation is the same rule as the real
    store: the nearest kept sync at or below the group's offset, +1 unless exact.
    """

    def __init__(self, kept: list[OffsetSync]) -> None:
        self.kept_syncs = sorted(kept, key=lambda sync: sync.upstream, reverse=True)

    def kept(self) -> list[OffsetSync]:
        return list(self.kept_syncs)

    def translate(self, upstream_offset: int) -> int | None:
        if not self.kept_syncs:
            return None
        for sync in self.kept_syncs:
            if sync.upstream <= upstream_offset:
                return sync.downstream + (0 if sync.upstream == upstream_offset else 1)
        return -1


def doubling_store(
    head_upstream: int, head_downstream: int, first_gap: int = DEFAULT_OFFSET_LAG_MAX
) -> DocumentedSyncStore:
    """Seed 002's store: syncs at the head, then gaps of first_gap, 2x, 4x, ... down to offset 0."""
    kept = [OffsetSync(head_upstream, head_downstream)]
    gap = first_gap
    upstream, downstream = head_upstream, head_downstream
    while len(kept) < SLOTS and upstream - gap >= 0:
        upstream, downstream = upstream - gap, downstream - gap
        kept.append(OffsetSync(upstream, downstream))
        gap *= 2
    return DocumentedSyncStore(kept)
