"""Every example in examples/ is exercised: configs load with the real loader, every ``kafka-backup``
command line in them parses against the real CLI, and every config file they name exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kbackup.app import config as config_module
from tests.support.cli_lines import command_lines, config_paths, parse_cli
from tests.support.metrics_text import (
    GRAFANA_DASHBOARD,
    alert_expressions,
    example_metric_names,
    metric_names,
)

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
CI_WORKFLOW = EXAMPLES / "ci-drill-workflow.yml"
K8S_CRONJOB = EXAMPLES / "k8s-backup-cronjob.yaml"
#: Prometheus rules; they and the Grafana dashboard are checked against real runs
#: (tests/integration/test_metrics_examples.py).
PROMETHEUS_ALERTS = EXAMPLES / "prometheus-alerts.yaml"
#: Config files (one kafka-backup config each); the Kubernetes manifest is checked on its own.
CONFIG_EXAMPLES = sorted(
    path for path in EXAMPLES.glob("*.yaml") if path not in (K8S_CRONJOB, PROMETHEUS_ALERTS)
)
_REQUIRED_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # no ":-default": must be set


def _load_with_env(text: str, path: Path, monkeypatch: pytest.MonkeyPatch) -> config_module.KBackupConfig:
    for name in _REQUIRED_ENV.findall(text):
        monkeypatch.setenv(name, "127.0.0.1:9092" if name.endswith("BOOTSTRAP") else "placeholder")
    path.write_text(text)
    return config_module.load(path)


def test_there_are_examples() -> None:
    names = {path.name for path in EXAMPLES.iterdir()}
    assert {
        "backup.yaml",
        "restore.yaml",
        "offset-reset.yaml",
        "continuous-backup.yaml",
        "drill.yaml",
        "backup-gcs.yaml",
        "backup-azure.yaml",
    } <= names
    assert {CI_WORKFLOW.name, K8S_CRONJOB.name, PROMETHEUS_ALERTS.name, "grafana-dashboard.json"} <= names


@pytest.mark.parametrize("path", CONFIG_EXAMPLES, ids=lambda p: p.name)
def test_example_config_validates(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _load_with_env(path.read_text(), tmp_path / path.name, monkeypatch)
    assert cfg.mode is not None
    if cfg.mode == "drill":
        # A drill names its own backup per run; its copies never land on production names.
        assert cfg.backup_id is None
        assert cfg.drill.topic_prefix
        assert cfg.drill.group_prefix
    else:
        assert cfg.backup_id == "nightly"


@pytest.mark.parametrize("path", CONFIG_EXAMPLES, ids=lambda p: p.name)
def test_example_config_says_how_to_run_it(path: Path) -> None:
    """The first comment line is the command that uses the file, and it parses."""
    lines = command_lines(path.read_text().splitlines()[0].lstrip("# "), path.name)
    assert lines, f"{path.name}: the first line should be '# kafka-backup ... -c examples/{path.name}'"
    for line in lines:
        parse_cli(line.args)
        assert f"examples/{path.name}" in config_paths(line.args)


def _workflow() -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(CI_WORKFLOW.read_text())
    return loaded


def test_ci_workflow_runs_the_drill_nightly_and_keeps_the_report() -> None:
    workflow = _workflow()
    triggers = workflow["on"] if "on" in workflow else workflow[True]  # YAML 1.1 reads a bare `on` as true
    assert triggers["schedule"][0]["cron"].split()[2:] == ["*", "*", "*"], "not every night"
    steps = workflow["jobs"]["drill"]["steps"]
    commands = [line for step in steps for line in command_lines(step.get("run", ""), CI_WORKFLOW.name)]
    assert [parse_cli(line.args) for line in commands] == [["check"], ["drill"]]
    drill = commands[-1].args
    report = Path(drill[drill.index("--report") + 1])
    for line in commands:
        for config in config_paths(line.args):
            assert (ROOT / config).is_file(), f"{CI_WORKFLOW.name} uses {config}, which does not exist"
    upload = next(step for step in steps if str(step.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload["if"] == "always()", "the report must be kept when the drill fails"
    assert report.parent.as_posix().rstrip("/") == upload["with"]["path"].rstrip("/")
    java = next(step for step in steps if str(step.get("uses", "")).startswith("actions/setup-java"))
    assert str(java["with"]["java-version"]) == "17"


def test_ci_workflow_provides_every_variable_the_drill_config_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workflow = _workflow()
    env = workflow["jobs"]["drill"]["env"]
    drill_config = (
        ROOT / config_paths(command_lines(workflow["jobs"]["drill"]["steps"][-2]["run"], "ci")[0].args)[0]
    )
    needed = set(_REQUIRED_ENV.findall(drill_config.read_text()))
    assert needed <= set(env), f"not set by the workflow: {needed - set(env)}"
    # Secrets come from GitHub's secret store, never written in the workflow.
    for name, value in env.items():
        if "PASSWORD" in name or "SECRET" in name:
            assert str(value).startswith("${{ secrets."), name
    _load_with_env(drill_config.read_text(), tmp_path / "drill.yaml", monkeypatch)


def _k8s_documents() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(K8S_CRONJOB.read_text())}


def test_k8s_cronjob_runs_a_valid_backup_of_its_configmap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    documents = _k8s_documents()
    config_map, cron_job = documents["ConfigMap"], documents["CronJob"]
    pod = cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert parse_cli(container["args"]) == ["backup"]
    (config_path,) = config_paths(container["args"])

    # The file the command reads is the ConfigMap's key, mounted where the command looks.
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    mount = mounts[config_path]
    volume = next(item for item in pod["volumes"] if item["name"] == mount["name"])
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    text = config_map["data"][mount["subPath"]]
    cfg = _load_with_env(text, tmp_path / "backup.yaml", monkeypatch)
    assert cfg.source is not None

    # Every secret the config reads comes from a Secret, through the environment.
    env = {item["name"]: item for item in container["env"]}
    for name in _REQUIRED_ENV.findall(text):
        assert name in env, f"{name} is read by the config but not set in the container"
        assert "secretKeyRef" in env[name]["valueFrom"]
    # The scratch folder is a writable volume (the root filesystem is read-only).
    assert cfg.backup.scratch_dir in mounts
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    # The uid is the image's own non-root user (Dockerfile: useradd --uid N).
    dockerfile = (ROOT / "Dockerfile").read_text()
    uid = int(re.search(r"useradd [^\n]*--uid (\d+)", dockerfile).group(1))  # type: ignore[union-attr]
    assert pod["securityContext"]["runAsUser"] == uid
    assert cron_job["spec"]["concurrencyPolicy"] == "Forbid"


def test_k8s_cronjob_scratch_bound_fits_its_volume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    documents = _k8s_documents()
    cfg = _load_with_env(documents["ConfigMap"]["data"]["backup.yaml"], tmp_path / "b.yaml", monkeypatch)
    pod = documents["CronJob"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    scratch = next(item for item in pod["volumes"] if item["name"] == "scratch")
    limit_gib = int(scratch["emptyDir"]["sizeLimit"].removesuffix("Gi"))
    assert cfg.backup.max_open_segments * cfg.backup.segment_max_bytes <= limit_gib * 2**30


def test_metrics_examples_parse_and_use_kafka_backup_metrics() -> None:
    """The rules and the dashboard load; the names they use are read as the integration test reads
    them (tests/integration/test_metrics_examples.py checks each against real runs)."""
    alerts = alert_expressions()
    assert {"KafkaBackupStale", "KafkaBackupLagGrowing", "KafkaBackupStorageErrors"} <= set(alerts)
    assert {"KafkaBackupSourceErrors", "KafkaBackupRestoreAuditDisagrees"} <= set(alerts)
    used = example_metric_names()
    assert "kafka_backup_last_increment_timestamp_seconds" in used[PROMETHEUS_ALERTS.name]
    # A histogram's series are named by the histogram.
    assert "kafka_backup_increment_commit_duration_seconds" in used[GRAFANA_DASHBOARD.name]
    assert not any(name.endswith(("_bucket", "_sum", "_count")) for names in used.values() for name in names)
    assert {"kafka_backup_restore_landed_records", "kafka_backup_restore_planned_records"} <= used[
        GRAFANA_DASHBOARD.name
    ]


def test_metric_names_are_read_from_promql() -> None:
    assert metric_names(
        "histogram_quantile(0.9, sum by (le) (rate(kafka_backup_x_seconds_bucket[5m]))) "
        '/ kafka_backup_records_total{backup_id=~"$b"} and kafka_backup_lag_records > 0'
    ) == {"kafka_backup_x_seconds", "kafka_backup_records_total", "kafka_backup_lag_records"}
