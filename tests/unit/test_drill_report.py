"""The drill's HTML report: who, when, what and the verdict, and charts whose labels fit."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from kbackup.app.drill_report import bar_chart, render_html, text_width
from tests.support.drill_reports import LONG_GROUP, sample_report

SVG = "{http://www.w3.org/2000/svg}"


def chart_texts(chart: str) -> tuple[float, list[tuple[float, str]], float]:
    """(svg width, [(x, text)] of every text, x where the bars start) of one chart."""
    svg = ET.fromstring(chart[chart.index("<svg") :])
    texts = [(float(node.get("x", 0)), node.text or "") for node in svg.iter(f"{SVG}text")]
    bars = [float(node.get("x", 0)) for node in svg.iter(f"{SVG}rect")]
    return float(svg.get("width", 0)), texts, min(bars)


def test_every_chart_label_fits_inside_its_drawing() -> None:
    values = {LONG_GROUP: 1_234_567.0, "short": 0.0, "drill.billing": 3.5}
    width, texts, bars_start = chart_texts(bar_chart("Records re-read per group", values, "records"))
    assert len(texts) == 2 * len(values)
    for x, text in texts:
        assert x + text_width(text) <= width, text
    for x, text in texts[::2]:  # the names, left of the bars
        assert x == 0
        assert text_width(text) < bars_start, text


def test_a_chart_of_the_old_fixed_layout_would_clip_this_label() -> None:
    """The check above can fail: the 560 px drawing with a 250 px label column that the report used
    before does not hold the long group name."""
    assert text_width(LONG_GROUP) > 250
    assert 256 + 300 + text_width("1.23457e+06 records") > 560


def test_the_page_says_who_when_what_and_the_verdict() -> None:
    page = render_html(sample_report())
    for fact in (
        "PASSED",
        "nightly-2026-11-24",
        "s3://backups/kafka",
        "prod-us-east-1",
        "SRC-kafka-id-4f2a",
        "TGT-kafka-id-9c1b",
        "2026-11-24T03:00:00.000Z",
        "2026-11-24T03:01:02.500Z",
        "62.5 s",
        "123,456 records of 2 topic(s)",
        "drill.payments",
        "17000",
        LONG_GROUP,
    ):
        assert fact in page, fact
    failed = render_html(sample_report(skipped=4))
    assert "FAILED" in failed
    assert "PASSED" not in failed
