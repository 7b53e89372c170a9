"""The ``restore_metadata`` section: which cluster metadata a restore brings back, and how.

docs/restore.md, "Cluster metadata". The passwords of SCRAM users never come from the backup
(Kafka never hands out a credential, and a backup stores none): they come from a secrets file or
an environment variable the operator provides at execute time.
"""

from __future__ import annotations

import os
import re
from typing import Any, Literal

import yaml
from pydantic import Field, SecretStr, field_validator

from kbackup.core.config import StrictModel, read_text_file
from kbackup.core.errors import ConfigError
from kbackup.core.secrets import register_secret

#: The kinds an operator may ask for; ``quotas`` is refused with the reason (no client API).
RequestedKind = Literal["acls", "users", "quotas", "broker_defaults", "broker_configs", "topic_configs"]
DEFAULT_KINDS: tuple[RequestedKind, ...] = ("acls", "users", "broker_defaults", "topic_configs")
#: The plan's name of each kind.
PLAN_KIND = {
    "acls": "acls",
    "users": "scram_users",
    "broker_defaults": "broker_configs",
    "broker_configs": "broker_configs",
    "topic_configs": "topic_configs",
}
_PRINCIPAL = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*:.+$")


class MetadataRestoreSettings(StrictModel):
    """What ``restore-metadata`` (and ``three-phase-restore`` with ``enabled``) restores."""

    enabled: bool = Field(
        default=False,
        description=(
            "Run the metadata restore as the first phase of `three-phase-restore` (before any record)."
        ),
    )
    kinds: list[RequestedKind] = Field(
        default_factory=lambda: list(DEFAULT_KINDS),
        description=(
            "What to restore: `acls`, `users` (SCRAM), `broker_defaults` (cluster-wide dynamic broker "
            "defaults, which need the printed `kafka-configs.sh` command), `broker_configs` (configs "
            "set on one broker, set on the target broker of the same id), `topic_configs` (the configs "
            "of topics that exist on the target, by `restore.existing_topics`). `quotas` cannot be "
            "chosen: confluent-kafka has no request that reads them, so no backup holds them."
        ),
    )
    principal_map: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Principals renamed on the target, `{User:prod-app: User:dr-app}`: ACLs and SCRAM users "
            "(`User:` principals) follow it. Two principals may not map onto one."
        ),
    )
    scram_passwords_file: str | None = Field(
        default=None,
        description=(
            "YAML file of SCRAM passwords, `{user: password}`, keyed by the user's name on the target. "
            "Read at execute; never copied into a plan."
        ),
    )
    scram_passwords_env: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Environment variable holding the same YAML mapping (instead of a file).",
    )
    remove_extra_acls: bool = Field(
        default=False,
        description=(
            "Delete ACLs the target has and the backup does not (after every creation). Off: they "
            "are listed in the plan and kept; nothing is deleted unless asked."
        ),
    )

    @field_validator("kinds")
    @classmethod
    def _no_quotas(cls, kinds: list[str]) -> list[str]:
        if "quotas" in kinds:
            raise ValueError(
                "client quotas cannot be restored: confluent-kafka has no request that reads them, so "
                "backups hold none (docs/backup.md); remove 'quotas' and set them with kafka-configs.sh"
            )
        if not kinds:
            raise ValueError(
                "name at least one kind (acls, users, broker_defaults, broker_configs, topic_configs)"
            )
        return kinds

    @field_validator("principal_map")
    @classmethod
    def _one_to_one(cls, mapping: dict[str, str]) -> dict[str, str]:
        for principal in [*mapping, *mapping.values()]:
            if not _PRINCIPAL.match(principal):
                raise ValueError(f"{principal!r} is not a principal (TYPE:name, such as User:app)")
        seen: dict[str, str] = {}
        for source, target in sorted(mapping.items()):
            if target in seen:
                raise ValueError(
                    f"{seen[target]} and {source} both map onto {target}: each target principal "
                    "may come from one source principal only"
                )
            seen[target] = source
        return mapping

    def password_source(self) -> str | None:
        """Where the passwords come from, as a plan names it (never the passwords)."""
        if self.scram_passwords_env is not None:
            return f"env {self.scram_passwords_env}"
        if self.scram_passwords_file is not None:
            return f"file {self.scram_passwords_file}"
        return None

    def load_passwords(self) -> dict[str, SecretStr]:
        """The SCRAM passwords by target user name; each problem one ConfigError naming the source."""
        if self.scram_passwords_env is not None:
            name = self.scram_passwords_env
            text = os.environ.get(name)
            if text is None:
                raise ConfigError(
                    f"environment variable {name} (restore_metadata.scram_passwords_env) is not set",
                    hint="export it with the YAML mapping {user: password}",
                )
            return _parse_passwords(text, f"environment variable {name}")
        if self.scram_passwords_file is not None:
            path = self.scram_passwords_file
            return _parse_passwords(
                read_text_file(path, "SCRAM passwords file"), f"SCRAM passwords file {path}"
            )
        return {}


def _parse_passwords(text: str, source: str) -> dict[str, SecretStr]:
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError:
        # Never the parser's words: they quote the line, which holds a password.
        raise ConfigError(f"{source} is not YAML", hint="write one 'user: password' per line") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source} is not a mapping of user: password", hint="write one 'user: password' per line"
        )
    passwords: dict[str, SecretStr] = {}
    for user, password in data.items():
        if not isinstance(user, str) or not isinstance(password, (str, int)) or isinstance(password, bool):
            raise ConfigError(f"{source}: the entry of {str(user)!r} is not 'user: password' text")
        if not str(password):
            raise ConfigError(f"{source}: the password of {user} is empty")
        register_secret(str(password))  # redacted from every log line and error from now on
        passwords[user] = SecretStr(str(password))
    return passwords


def map_principal(principal: str, principal_map: dict[str, str]) -> str:
    return principal_map.get(principal, principal)


def map_user(user: str, principal_map: dict[str, str]) -> str:
    """A SCRAM user's name on the target: the map applied to ``User:<user>``."""
    mapped = principal_map.get(f"User:{user}")
    return mapped.split(":", 1)[1] if mapped is not None and mapped.startswith("User:") else user
