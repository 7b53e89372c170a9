"""The metadata-restore plan, worked out from a backup's metadata and a target's state (pure).

Each expectation is written out by hand from the inputs: which item the target lacks, has, or has
otherwise; nothing here runs Kafka (tests/integration/test_restore_metadata.py does).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.core.errors import ConfigError
from kbackup.core.secrets import redact
from kbackup.format.cluster_metadata import (
    AclBinding,
    BrokerConfig,
    BrokerConfigs,
    BrokerConfigsSection,
    ScramCredentialInfo,
    ScramUser,
)
from kbackup.format.manifest import TopicEntry
from kbackup.format.metadata_plan import (
    AclItem,
    BrokerConfigItem,
    MetadataItem,
    MetadataPlan,
    MetadataSource,
    ScramUserItem,
    TopicConfigItem,
    read_metadata_plan,
)
from kbackup.format.reset_plan import TargetInfo
from kbackup.restore.metadata_plan import (
    BackupMetadata,
    PlanInputs,
    TopicPolicy,
    acl_items,
    broker_items,
    check_principal_map,
    default_items,
    topic_items,
    user_items,
)
from kbackup.restore.metadata_settings import MetadataRestoreSettings
from kbackup.restore.metadata_target import TargetSecurity
from kbackup.restore.plan import RestoredTopic


def acl(
    principal: str, name: str = "orders", pattern: str = "LITERAL", operation: str = "READ"
) -> AclBinding:
    return AclBinding(
        resource_type="TOPIC",
        resource_name=name,
        pattern_type=pattern,
        principal=principal,
        host="*",
        operation=operation,
        permission="ALLOW",
    )


def inputs(settings: MetadataRestoreSettings | None = None, **overrides: object) -> PlanInputs:
    values: dict[str, object] = {
        "settings": settings or MetadataRestoreSettings(),
        "topic_mapping": {},
        "servers": "dr:9092",
        "users_with_password": set(),
    }
    values.update(overrides)
    return PlanInputs(**values)  # type: ignore[arg-type]


def target(**fields: object) -> TargetSecurity:
    return TargetSecurity(cluster_id="dr", broker_ids=[1], authorizer="StandardAuthorizer", **fields)  # type: ignore[arg-type]


def test_acls_the_target_lacks_are_created_and_those_it_has_exist() -> None:
    backup = [acl("User:a"), acl("User:b", operation="WRITE")]
    items = acl_items(backup, target(acls={acl("User:a")}), inputs())
    assert [(item.action, item.binding.principal) for item in items if isinstance(item, AclItem)] == [
        ("exists", "User:a"),
        ("create", "User:b"),
    ]


def test_principal_and_topic_renames_follow_the_maps_and_a_prefix_says_what_it_no_longer_covers() -> None:
    settings = MetadataRestoreSettings(principal_map={"User:prod-app": "User:dr-app"})
    backup = [acl("User:prod-app"), acl("User:prod-app", name="ord", pattern="PREFIXED")]
    items = acl_items(backup, target(), inputs(settings, topic_mapping={"orders": "dr.orders"}))
    literal, prefixed = items
    assert isinstance(literal, AclItem)
    assert isinstance(prefixed, AclItem)
    assert (literal.binding.principal, literal.binding.resource_name) == ("User:dr-app", "dr.orders")
    assert (literal.source_principal, literal.source_resource) == ("User:prod-app", "orders")
    # A prefixed ACL keeps its prefix; the renamed topic falls outside it, and the plan says so.
    assert prefixed.binding.resource_name == "ord"
    assert prefixed.reason is not None
    assert "orders -> dr.orders" in prefixed.reason


def test_extra_acls_on_the_target_are_kept_unless_removal_is_asked_for() -> None:
    extra = acl("User:someone-else")
    kept = acl_items([], target(acls={extra}), inputs())
    assert [(item.action, item.binding) for item in kept if isinstance(item, AclItem)] == [("skip", extra)]
    removed = acl_items([], target(acls={extra}), inputs(MetadataRestoreSettings(remove_extra_acls=True)))
    assert [item.action for item in removed] == ["delete"]


def test_a_map_that_merges_two_principals_is_refused_in_one_line() -> None:
    backup = BackupMetadata(acls=[acl("User:a"), acl("User:b")])
    with pytest.raises(ConfigError, match="maps User:a and User:b onto User:b"):
        check_principal_map(backup, {"User:a": "User:b"})
    with pytest.raises(ValueError, match="both map onto User:c"):
        MetadataRestoreSettings(principal_map={"User:a": "User:c", "User:b": "User:c"})
    check_principal_map(backup, {"User:a": "User:c"})  # a one-to-one map passes


def scram(user: str, *credentials: tuple[str, int]) -> ScramUser:
    return ScramUser(
        user=user,
        credentials=[ScramCredentialInfo(mechanism=mech, iterations=it) for mech, it in credentials],
    )


def test_scram_users_need_a_password_and_an_existing_credential_is_left_alone(tmp_path: Path) -> None:
    settings = MetadataRestoreSettings(scram_passwords_file=str(tmp_path / "pw.yaml"))
    backup = [
        scram("alice", ("SCRAM-SHA-256", 4096)),
        scram("bob", ("SCRAM-SHA-512", 8192)),
        scram("carol", ("SCRAM-SHA-512", 4096)),
        scram("dave", ("SCRAM-SHA-256", 4096)),
    ]
    state = target(users={"carol": {"SCRAM-SHA-512": 4096}, "dave": {"SCRAM-SHA-256": 10000}})
    items = user_items(backup, state, inputs(settings, users_with_password={"alice"}))
    got = {item.user: (item.action, item.password_from) for item in items if isinstance(item, ScramUserItem)}
    assert got == {
        "alice": ("create", f"file {tmp_path / 'pw.yaml'}"),
        "bob": ("skip", None),
        "carol": ("exists", None),
        "dave": ("differs", None),
    }


def test_passwords_come_from_a_file_or_the_environment_and_are_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "pw.yaml"
    file.write_text("alice: Wonder-Land-1\n")
    passwords = MetadataRestoreSettings(scram_passwords_file=str(file)).load_passwords()
    assert passwords["alice"].get_secret_value() == "Wonder-Land-1"
    assert "Wonder-Land-1" not in redact("password Wonder-Land-1")
    monkeypatch.setenv("DR_PASSWORDS", '{"bob": "Builder-22"}')
    from_env = MetadataRestoreSettings(scram_passwords_env="DR_PASSWORDS").load_passwords()
    assert from_env["bob"].get_secret_value() == "Builder-22"
    file.write_text("- not a mapping\n")
    with pytest.raises(ConfigError, match="is not a mapping of user: password"):
        MetadataRestoreSettings(scram_passwords_file=str(file)).load_passwords()
    monkeypatch.delenv("DR_PASSWORDS")
    with pytest.raises(ConfigError, match=r"DR_PASSWORDS .* is not set"):
        MetadataRestoreSettings(scram_passwords_env="DR_PASSWORDS").load_passwords()


def test_quotas_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="confluent-kafka has no request that reads them"):
        MetadataRestoreSettings(kinds=["acls", "quotas"])


def configs(
    default: list[tuple[str, str | None]], broker: list[tuple[str, str | None]]
) -> BrokerConfigsSection:
    def make(pairs: list[tuple[str, str | None]]) -> list[BrokerConfig]:
        return [BrokerConfig(name=name, value=value, sensitive=value is None) for name, value in pairs]

    return BrokerConfigsSection(
        status="captured",
        cluster_default=make(default),
        brokers=[
            BrokerConfigs(broker_id=1, configs=make(broker)),
            BrokerConfigs(broker_id=7, configs=make(broker)),
        ],
    )


def test_cluster_defaults_are_commands_for_an_operator_and_broker_configs_go_to_the_same_broker() -> None:
    section = configs(
        [("log.cleaner.threads", "2"), ("min.insync.replicas", "1"), ("ssl.key.password", None)],
        [("log.cleaner.io.buffer.load.factor", "0.8")],
    )
    state = target(cluster_default={"min.insync.replicas": "1"}, brokers={1: {}})
    defaults = {
        item.name: item
        for item in default_items(section, state, "dr:9092")
        if isinstance(item, BrokerConfigItem)
    }
    assert defaults["min.insync.replicas"].action == "exists"
    assert defaults["ssl.key.password"].action == "skip"
    manual = defaults["log.cleaner.threads"]
    assert manual.action == "manual"
    assert manual.reason is not None
    assert "--entity-default --alter --add-config log.cleaner.threads=2" in manual.reason
    per_broker = [
        (item.broker_id, item.action)
        for item in broker_items(section, state)
        if isinstance(item, BrokerConfigItem)
    ]
    assert per_broker == [(1, "create"), (7, "skip")]


def test_a_plan_file_round_trips_and_its_changes_come_in_apply_order(tmp_path: Path) -> None:
    plan = MetadataPlan(
        created_at="2026-11-26T00:00:00Z",
        tool_version="0",
        source=MetadataSource(backup_id="b", storage_url="file:///x", increments={"acls": 1}),
        target=TargetInfo(cluster_id="dr", bootstrap_servers=["dr:9092"]),
        kinds=["acls", "users"],
        items=[
            AclItem(action="delete", binding=acl("User:x")),
            AclItem(action="create", binding=acl("User:a")),
            ScramUserItem(action="create", user="a", mechanism="SCRAM-SHA-256", iterations=4096),
            BrokerConfigItem(action="alter", broker_id=1, name="n", value="v"),
            AclItem(action="exists", binding=acl("User:b")),
        ],
    )
    path = tmp_path / "plan.json"
    path.write_bytes(plan.to_json_bytes())
    again = read_metadata_plan(path)
    assert again == plan
    assert [item.kind + ":" + item.action for item in again.changes()] == [
        "broker_configs:alter",
        "scram_users:create",
        "acls:create",
        "acls:delete",
    ]
    path.write_text('{"format": "kafka-backup-reset-plan"}')
    with pytest.raises(ConfigError, match="is not a kafka-backup metadata plan"):
        read_metadata_plan(path)


def restored(name: str, partitions: int, configs: dict[str, str], target: str | None = None) -> RestoredTopic:
    entry = TopicEntry(name=name, partitions=partitions, configs=configs)
    return RestoredTopic(entry=entry, target_topic=target or name, partitions=list(range(partitions)))


def policy(mode: str) -> TopicPolicy:
    return TopicPolicy(
        existing_topics=mode, copy_topic_configs=True, exclude_topic_configs=[], target_partitions={}
    )


TOPICS = [
    restored("orders", 3, {"cleanup.policy": "compact"}),
    restored("audit", 1, {}, target="dr.audit"),
    restored("same", 2, {"retention.ms": "1000"}),
]
STATE = target(
    partitions={"orders": 2, "same": 2},
    topic_configs={"orders": {"cleanup.policy": "delete"}, "same": {"retention.ms": "1000"}},
)


def by_topic(items: list[MetadataItem]) -> dict[tuple[str, str], str]:
    return {(item.topic, item.name): item.action for item in items if isinstance(item, TopicConfigItem)}


def test_existing_topics_validate_reports_apply_alters_and_missing_ones_are_left_to_the_data_restore() -> (
    None
):
    validated, stopping = topic_items(TOPICS, STATE, policy("validate"))
    assert stopping == []
    assert by_topic(validated) == {
        ("orders", "cleanup.policy"): "differs",
        ("orders", "partitions"): "differs",
        ("dr.audit", "partitions"): "skip",
        ("same", "partitions"): "exists",
    }
    applied, _ = topic_items(TOPICS, STATE, policy("apply"))
    assert by_topic(applied)[("orders", "cleanup.policy")] == "alter"
    assert by_topic(applied)[("orders", "partitions")] == "alter"
    [raise_to] = [
        i
        for i in applied
        if isinstance(i, TopicConfigItem) and i.name == "partitions" and i.action == "alter"
    ]
    assert (raise_to.value, raise_to.target_value) == ("3", "2")


def test_existing_topics_fail_names_each_difference() -> None:
    _, stopping = topic_items(TOPICS, STATE, policy("fail"))
    assert len(stopping) == 2
    assert any("orders cleanup.policy: backup compact, target delete" in line for line in stopping)
    # More partitions on the target than in the backup cannot be fixed, and apply says so.
    more = target(partitions={"orders": 5}, topic_configs={"orders": {"cleanup.policy": "compact"}})
    items, _ = topic_items(TOPICS[:1], more, policy("apply"))
    assert by_topic(items) == {("orders", "partitions"): "differs"}
