"""The storage benchmark compares the four stores like with like: every store is warmed up unmeasured,
the order rotates so each store runs in every place over four rounds, and each ratio is taken
against the local folder's run of the same round."""

from __future__ import annotations

import json

from bench._stats import Turn, first_counts, schedule
from bench.bench_storage import DEFAULT_ROUNDS, LOCAL, Operation, Run, as_json, measure, rounds_list, table

STORES = [LOCAL, "S3 (moto server)", "GCS (fake-gcs-server)", "Azure (Azurite)"]
#: Seconds of each store's runs: the folder's slows down in the last round, S3 always takes twice it.
SECONDS = {LOCAL: [1.0, 1.0, 1.0, 2.0], "S3 (moto server)": [2.0, 2.0, 2.0, 4.0]}


def measured() -> tuple[Operation, list[Turn[str]]]:
    operation = Operation("backup", 1_000)
    calls: list[Turn[str]] = []

    def run(turn: Turn[str]) -> Run:
        calls.append(turn)
        if turn.round_ is None:
            return Run(1_000, 1_000.0)  # a warm-up this slow would show in every figure if it counted
        return Run(1_000, SECONDS.get(turn.side, [0.5] * DEFAULT_ROUNDS)[turn.round_])

    measure(operation, STORES, DEFAULT_ROUNDS, run)
    return operation, calls


def test_every_store_runs_first_once_in_four_rounds_after_an_unmeasured_warm_up() -> None:
    operation, calls = measured()
    assert [(turn.side, turn.round_) for turn in calls[:4]] == [(store, None) for store in STORES]
    assert first_counts(schedule(STORES, DEFAULT_ROUNDS)) == dict.fromkeys(STORES, 1)
    assert [order[0] for order in operation.orders] == STORES
    assert all(len(runs) == DEFAULT_ROUNDS for runs in operation.runs.values())


def test_a_ratio_is_taken_against_the_local_folder_of_the_same_round() -> None:
    operation, _ = measured()
    # The folder's slow last round slows S3's too: paired by round, the ratio stays 0.5.
    assert operation.ratios("S3 (moto server)") == [0.5] * DEFAULT_ROUNDS
    assert operation.ratios("GCS (fake-gcs-server)") == [2.0, 2.0, 2.0, 4.0]


def test_the_table_gives_rates_and_ratios_with_their_range() -> None:
    operation, _ = measured()
    rows = table([operation]).splitlines()
    assert "| backup | local folder | 1,000 | 4 | 1,000 (500-1,000) |" in rows[2]
    assert rows[2].endswith("| 1 (the reference) |")
    assert rows[3].endswith("| 0.50 (0.50-0.50) |")
    assert rows[4].endswith("| 2.00 (2.00-4.00) |")
    assert rounds_list([operation])[0].startswith(
        "- backup, round 1 (order: local folder, S3 (moto server), GCS (fake-gcs-server), Azure (Azurite))"
    )


def test_the_json_file_holds_every_measured_run() -> None:
    operation, _ = measured()
    stored = json.loads(json.dumps(as_json([operation], DEFAULT_ROUNDS)))
    s3 = stored["operations"][0]["stores"]["S3 (moto server)"]
    assert s3["seconds"] == SECONDS["S3 (moto server)"]
    assert s3["ratio_to_local_folder"] == [0.5] * DEFAULT_ROUNDS
