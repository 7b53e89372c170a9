"""The drill's HTML report: who, when, what and the verdict, and charts whose labels fit."""

from __future__ import annotations

import html
import json
import re
import typing
import xml.etree.ElementTree as ET
from pathlib import Path

from pydantic import BaseModel

import kbackup
from kbackup.app.config import KBackupConfig
from kbackup.app.drill import drill_report_for
from kbackup.app.drill_report import (
    ERASED_VALUES,
    PROPERTY_MAPS,
    DrillReport,
    bar_chart,
    config_digest,
    render_html,
    text_width,
)
from kbackup.backup.settings import TopicSelection
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


MARK = "LEAKME-7f3c9"


def secret_laden_config(mark: str = MARK, *, batch: int = 500) -> KBackupConfig:
    """A config with ``mark`` in every secret field and as every value of every properties map."""
    security = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "kafka-backup",
        "sasl_password": mark,
        "ssl_key_password": mark,
    }
    # Values under names that do not look secret too: a JAAS line can hide under any name.
    properties = {"sasl.jaas.config": mark, "client.id": mark, "fetch.max.bytes": mark}
    return KBackupConfig.model_validate(
        {
            "source": {
                "bootstrap_servers": ["kafka-1:9093"],
                "security": security,
                "properties": properties,
                "topics": {"include": ["orders"]},
            },
            "target": {
                "bootstrap_servers": ["dr-kafka-1:9093"],
                "security": security,
                "properties": properties,
            },
            "storage": {
                "url": "s3://backups/kafka",
                "access_key_id": mark,
                "secret_access_key": mark,
                "session_token": mark,
            },
            "restore": {"producer_properties": properties, "transaction_max_records": batch},
            "mapping": {"kafka_options": properties, "spark_conf": {"spark.hadoop.fs.s3a.secret.key": mark}},
        }
    )


def filled_report(config: KBackupConfig) -> DrillReport:
    """The sample report as a drill on ``config`` would start it: version, storage and digest from it."""
    started = drill_report_for(config, backup_id="nightly-2026-11-24", notes=[])
    report = sample_report()
    report.kafka_backup_version = started.kafka_backup_version
    report.config_sha256 = started.config_sha256
    report.storage = started.storage
    return report


def test_the_report_names_the_version_and_the_config_by_its_digest_and_says_what_the_digest_covers() -> None:
    config = secret_laden_config()
    report = filled_report(config)
    digest = config_digest(config)
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert report.config_sha256 == digest
    document = json.loads(json.dumps(report.to_dict()))
    assert document["kafka_backup_version"] == kbackup.__version__
    assert document["config_digest"]["sha256"] == digest
    assert "secret" in document["config_digest"]["covers"]
    page = render_html(report)
    assert f"kafka-backup {kbackup.__version__}" in page
    assert digest in page
    assert html.escape(document["config_digest"]["covers"]) in page


def test_no_secret_of_the_config_is_in_the_report_and_none_moves_the_digest() -> None:
    config = secret_laden_config()
    report = filled_report(config)
    for text in (render_html(report), json.dumps(report.to_dict())):
        assert MARK not in text
    # The digest hides the secrets, not just their text: another value of each gives the same
    # digest, so it cannot be tried against guessed passwords.
    assert config_digest(secret_laden_config("another-secret")) == config_digest(config)
    # Any other setting moves it.
    assert config_digest(secret_laden_config(batch=501)) != config_digest(config)
    assert config.source is not None
    source = config.source.model_copy(update={"topics": TopicSelection(include=["payments"])})
    topics = config.model_copy(update={"source": source})
    assert config_digest(topics) != config_digest(config)


def test_every_map_of_the_config_that_may_hold_a_secret_is_left_out_of_the_digest() -> None:
    """A map of strings added to the config later is either a properties map (its values can be
    secrets) or named here as one whose values are settings."""
    settings_maps = {"topic_mapping", "principal_map"}
    found: set[str] = set()

    def walk(model: type[BaseModel]) -> None:
        for name, info in model.model_fields.items():
            kinds = [info.annotation, *nested_types(info.annotation)]
            for kind in kinds:
                if isinstance(kind, type) and issubclass(kind, BaseModel):
                    walk(kind)
            values = [typing.get_args(kind)[1] for kind in kinds if typing.get_origin(kind) is dict]
            if any(str in (value, *nested_types(value)) for value in values):
                found.add(name)

    walk(KBackupConfig)
    assert {"properties", "topic_mapping", "spark_conf"} <= found  # the walk finds maps
    hidden = PROPERTY_MAPS | ERASED_VALUES
    assert found - settings_maps <= hidden, found - settings_maps - hidden
    assert {"properties", "producer_properties", "kafka_options", "spark_conf"} <= PROPERTY_MAPS


def is_dict(annotation: object) -> bool:
    return typing.get_origin(annotation) is dict


def nested_types(annotation: object) -> list[object]:
    found: list[object] = []
    for kind in typing.get_args(annotation):
        found += [kind, *nested_types(kind)]
    return found


def test_user_info_of_a_storage_url_is_not_in_the_report() -> None:
    report = sample_report()
    report.storage = "s3://AKIA:" + MARK + "@backups/kafka"
    for text in (render_html(report), json.dumps(report.to_dict())):
        assert MARK not in text
        assert "backups/kafka" in text


def test_the_report_says_how_many_records_the_proof_read_back_and_compared() -> None:
    report = sample_report()
    report.records_read_back, report.records_compared = 12_345, 20_001
    document = report.to_dict()
    assert (document["records_read_back"], document["records_compared"]) == (12_345, 20_001)
    page = render_html(report)
    assert "12,345 restored records read back" in page
    assert "20,001" in page


def test_phases_after_the_groups_were_committed_are_marked_after_recovery() -> None:
    """The audit order: the groups are committed by the reset; verify, the Spark mapping, the audit and
    the drill's proof run after it and are not part of the recovery time."""
    report = sample_report()
    report.phase_seconds = {
        "backup": 4.2, "restore": 6.75, "reset": 0.8, "verify": 0.2,
        "mapping": 21.0, "audit": 0.3, "proof": 1.5,
    }  # fmt: skip
    report.three_phase["recovery_seconds"] = 7.9
    document = report.to_dict()
    parts = {phase["name"]: phase["part"] for phase in document["phases"]}
    assert parts == {
        "backup": "before recovery",
        "restore": "recovery",
        "reset": "recovery",
        "verify": "after recovery",
        "mapping": "after recovery",
        "audit": "after recovery",
        "proof": "after recovery",
    }
    assert [phase["name"] for phase in document["phases"]] == list(report.phase_seconds)
    assert document["recovery_seconds"] == 7.9
    assert document["after_recovery_seconds"] == 23.0
    page = render_html(report)
    assert "mapping (after recovery)" in page  # the chart's row, not a bar of the recovery
    assert "restore (after recovery)" not in page
    assert "backup (before recovery)" in page
    assert "7.9 s from the start of the restore to every group committed" in page
    assert "23.0 s after recovery" in page
    # The mapping built first (build_mapping: always) is part of the recovery.
    report.phase_seconds = {"backup": 4.2, "restore": 6.75, "mapping": 21.0, "reset": 0.8, "verify": 0.2}
    parts = {phase["name"]: phase["part"] for phase in report.to_dict()["phases"]}
    assert parts["mapping"] == "recovery"
    assert parts["verify"] == "after recovery"


def test_the_json_report_has_a_version_for_its_readers() -> None:
    document = sample_report().to_dict()
    assert document["report_version"] == 1
    assert next(iter(document)) == "report_version"


def test_the_runbook_describes_every_field_of_the_json_report() -> None:
    runbook = (Path(__file__).parents[2] / "docs" / "runbook.md").read_text()
    section = runbook[runbook.index("#### The drill report") :]
    section = section[: section.index("\n## ")]
    described = {name for row in re.findall(r"^\| (`.+?`) \|", section, re.M) for name in row.split(", ")}
    assert {f"`{name}`" for name in sample_report().to_dict()} == described


def test_the_report_says_how_many_brokers_each_cluster_had() -> None:
    report = sample_report()
    assert report.source is not None
    assert report.target is not None
    assert "clusters:" not in "\n".join(report.summary_lines())  # not read: not claimed
    report.source.brokers, report.target.brokers = 3, 1
    assert "clusters: source 3 broker(s), target 1 broker(s)" in report.summary_lines()
    clusters = report.to_dict()["clusters"]
    assert (clusters["source"]["brokers"], clusters["target"]["brokers"]) == (3, 1)
    page = render_html(report)
    assert "SRC-kafka-id-4f2a, kafka-1:9093 (SASL_SSL), 3 broker(s)" in html.unescape(page)
