"""The reset benchmark's search shapes: what the compacted and transactional partitions hold, and a
shape whose holes could not be made says so in the text the benchmark writes."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path

from bench.__main__ import markdown_tables
from bench._restored_shapes import (
    ABORT_EVERY,
    FIRST_ORIGIN_OFFSET,
    active_segment_base,
    cleaned_to,
    compacted_records,
    transaction_sizes,
)
from bench.bench_reset import (
    ScanCrossing,
    SearchResultSet,
    SearchRun,
    search_cases,
    search_report,
    shape_made,
)


def test_the_compacted_shape_has_source_gaps_and_superseded_records_in_origin_order() -> None:
    records = list(compacted_records(20_000, random.Random(1)))
    origins = [origin for origin, _ in records]
    assert origins[0] == FIRST_ORIGIN_OFFSET
    assert origins == sorted(set(origins))  # one source partition, in order
    gaps = Counter(b - a - 1 for a, b in itertools.pairwise(origins))
    assert set(gaps) == {0, 1, 5}
    keys = [key for _, key in records]
    last_of_key = {key: index for index, key in enumerate(keys)}
    superseded = sum(1 for index, key in enumerate(keys) if last_of_key[key] != index)
    # About one in five records is superseded by a later record of its key, not far ahead.
    assert 0.15 * len(keys) < superseded < 0.25 * len(keys)
    assert all(last_of_key[key] - index <= 200 * 20 for index, key in enumerate(keys))
    assert list(compacted_records(1_000, random.Random(1))) == list(
        compacted_records(1_000, random.Random(1))
    )


def test_the_transactional_shape_commits_every_record_once_and_aborts_one_transaction_in_five() -> None:
    plan = list(transaction_sizes(50_000, random.Random(3)))
    assert sum(size for size, aborted in plan if not aborted) == 50_000
    aborted = [index for index, (_, is_aborted) in enumerate(plan) if is_aborted]
    assert aborted
    assert all(index % ABORT_EVERY == ABORT_EVERY - 2 for index in aborted)
    assert all(20 <= size <= 2_000 for size, _ in plan[:-1])


def test_the_cleaner_progress_is_read_from_the_brokers_checkpoint(tmp_path: Path) -> None:
    assert cleaned_to(tmp_path, "search-compacted") == 0
    (tmp_path / "cleaner-offset-checkpoint").write_text("0\n2\nother 0 99\nsearch-compacted 0 4000\n")
    assert cleaned_to(tmp_path, "search-compacted") == 4000
    folder = tmp_path / "search-compacted-0"
    folder.mkdir()
    for base in (0, 2000, 4000):
        (folder / f"{base:020d}.log").write_bytes(b"")
    assert active_segment_base(tmp_path, "search-compacted") == 4000


def test_search_cases_span_the_origins_the_shape_made() -> None:
    cases = dict(search_cases(1_000_000, 1_000_399))
    assert cases["first record"] == 1_000_000
    assert cases["middle"] == 1_000_200
    assert cases["last record"] == 1_000_399
    assert cases["past the end (all processed)"] == 1_000_400


def result(shape: str, *, log_end: int, visible: int, last_origin: int, note: str = "") -> SearchResultSet:
    found = SearchResultSet(
        shape=shape, records=visible, fill_seconds=1.0, log_end=log_end, visible=visible,
        first_origin=FIRST_ORIGIN_OFFSET, last_origin=last_origin, note=note,
    )  # fmt: skip
    found.searches = [SearchRun("middle", FIRST_ORIGIN_OFFSET + 50, 40, 3, 2, 4096, 0.01)]
    found.scan = {FIRST_ORIGIN_OFFSET + 50: ScanCrossing(41, 0.5, 40)}
    found.scan_received_bytes = 2**20
    return found


def test_a_shape_without_its_holes_says_so_in_the_written_text() -> None:
    made = result("transactional", log_end=1_100, visible=1_000, last_origin=FIRST_ORIGIN_OFFSET + 999)
    assert shape_made(made).startswith("100 target offsets without a visible record")
    flat = result(
        "compacted", log_end=1_000, visible=1_000, last_origin=FIRST_ORIGIN_OFFSET + 1_399, note="x"
    )
    assert shape_made(flat).startswith("**the shape could not be made as described**")
    text = "\n".join(search_report([result("hole-free", log_end=1_000, visible=1_000,
                                           last_origin=FIRST_ORIGIN_OFFSET + 999), flat]))  # fmt: skip
    assert "- **compacted**:" in text
    assert "could not be made" in text
    (header, rows), *_ = markdown_tables(text)
    assert header[0] == "shape"
    assert [row[0] for row in rows] == ["hole-free", "compacted"]
