"""The metrics benchmark says what it measures: a backup always collects its metrics, so its two
sides differ only in serving them (``--metrics-port``) and being scraped, never in collecting."""

from __future__ import annotations

from bench._perf import BackupRunResult
from bench.bench_metrics import SERVED, SIDES, UNSERVED, CostRow, cost_table, section, verdict_line
from kbackup.core.metrics import MetricsSettings


def run(records_per_second: float, cpu_seconds: float) -> BackupRunResult:
    return BackupRunResult(1_000, 1_000 / records_per_second, 1.0, 0, 0, cpu_seconds)


ROW = CostRow(
    1_000,
    unserved=(run(100.0, 1.0), run(100.0, 1.0)),
    served=(run(99.0, 1.01), run(98.0, 1.02)),
    scrapes=4,
    scrape_seconds=(0.01, 0.02),
)


def test_the_product_has_no_switch_that_turns_collection_off() -> None:
    # The premise of the benchmark's wording: the metrics settings only serve or write what a run
    # collects. A new setting here (one that stops collecting) means bench_metrics can measure
    # collection too, and its section must be revisited.
    assert set(MetricsSettings.model_fields) == {"port", "bind_address", "textfile", "health_window_secs"}


def test_the_sides_are_served_or_not_never_metrics_on_or_off() -> None:
    assert set(SIDES) == {UNSERVED, SERVED}
    header = cost_table(ROW).splitlines()[0]
    assert "metrics off" not in header
    assert "metrics on" not in header
    assert "not served rec/s" in header
    assert "served, scraped every second" in header


def test_the_section_says_it_measures_serving_and_scraping_only() -> None:
    text = section(ROW, cost_table(ROW), "| scrapes |", "--records 1000", 1_000, ((1, 1, 1), (2, 2, 2)))
    title = text.splitlines()[0]
    assert title == "## Metrics: the cost of serving and scraping them"
    assert "metrics off" not in text
    assert "metrics on" not in text
    assert "not collecting them" in text
    assert "both sides below collect" in text
    verdict = verdict_line(ROW)
    assert "serving the metrics and scraping them" in verdict
    assert "The cost of collecting them is not measured" in verdict
    # Median paired ratio 0.985 (cost 1.5%), CPU +1.5%: under the 3% bound.
    assert "**met**" in verdict
