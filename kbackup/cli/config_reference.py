"""docs/configuration.md, generated from the config models: ``python -m kbackup.cli.config_reference``.

Every key of every section comes from the pydantic models in ``kbackup.app.config``
and the stage packages (type, default, constraints and the field's
``description``), so the reference cannot drift from what the loader accepts;
``tests/unit/test_config_reference.py`` fails when the file is stale.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from typing import Any

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from kbackup.app.config import KBackupConfig

#: Which sections each command reads (the loader accepts all of them in any file).
COMMAND_SECTIONS: list[tuple[str, str]] = [
    ("backup", "`backup_id`, `source`, `storage`, `backup`"),
    ("list, describe, validate", "`storage` (or `--path`)"),
    ("restore", "`backup_id`, `target`, `storage`, `restore`"),
    ("show-offset-mapping", "`target`, `mapping`"),
    (
        "offset-reset plan/execute, offset-reset-bulk",
        "`backup_id`, `target`, `storage`, `offset_reset`, `restore.topic_mapping`; "
        "`source` with `source_offsets: live`",
    ),
    (
        "three-phase-restore",
        "`backup_id`, `target`, `storage`, `restore`, `mapping`, `offset_reset`, `three_phase`",
    ),
    (
        "drill",
        "`source`, `target`, `storage`, `backup`, `restore`, `mapping`, `offset_reset`, "
        "`three_phase.build_mapping`, `drill`; `backup_id` (default `drill-<UTC time>`)",
    ),
    ("check", "`source`, `target`, `storage`"),
]

_INTRO = """\
# Configuration reference

Generated from the config models by `python -m kbackup.cli.config_reference`
(`make docs`); do not edit by hand (`tests/unit/test_config_reference.py`
fails when this file is stale).

One YAML file may hold the sections of several commands; each command reads
the sections it needs and ignores the others. Files are validated before any
network call: an unknown key, a wrong type or a value out of range is one
error line naming the file and the key (exit code 3, see
[exit-codes.md](exit-codes.md)). Command-line options override the file.

- `${NAME}` anywhere in a value is replaced by the environment variable
  `NAME` (an error if it is not set); `${NAME:-default}` falls back to
  `default`; `$${` is a literal `${`. Substitution happens after YAML parsing,
  so a secret's characters are never read as YAML.
- Keys marked *secret* are held so that their value is never printed, logged
  or written to a report; values substituted into them from the environment
  are masked (`***`) wherever they would appear. See [security.md](security.md).
- *unset* means the key may be left out (or set to `null`); what happens then
  is in the description.
- Relative paths in a config file are relative to **the config file's
  folder**, not to the folder the command runs in: a folder `storage.url`
  (or `storage.path`), `backup.scratch_dir`, `three_phase.state_dir`,
  `offset_reset.snapshot_dir` and `mapping_file`, `drill.report_path`,
  `mapping.spark_jars`, the `security` files (`ssl_*_location`), and files
  named in librdkafka `properties` and `mapping.kafka_options`
  (`*.location`, `sasl.kerberos.keytab`). With a config file, the defaults of
  the folder keys (`./kafka-backups`, `three-phase-state`, `offset-snapshots`,
  `drill-report.json`) are beside the file too, so a command run again from
  another folder finds the same backup and state. Command-line options
  (`--path`, `--state-dir`, `--snapshot-dir`, `--report`, `--output`) are
  relative to the current folder, and so are the defaults when no config file
  is given.

Example files: [examples/](../examples/).
"""


def _type_name(annotation: Any) -> str:
    """A reader's name for a field's type: ``integer``, ``list of string``, ``"a" | "b"``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin is typing.Annotated:
        return _type_name(args[0])  # a checked type (DurationText) reads as what it holds
    if origin is typing.Literal:
        return " | ".join(f"`{json.dumps(value)}`" for value in args)
    if origin in (typing.Union, types.UnionType):
        kept = [arg for arg in args if arg is not type(None)]
        if set(kept) == {str, SecretStr}:
            return "string"  # a property value, held as a secret when its name looks secret
        return " or ".join(_type_name(arg) for arg in kept)
    if origin is list:
        return f"list of {_type_name(args[0])}"
    if origin is dict:
        return f"map of {_type_name(args[0])} to {_type_name(args[1])}"
    if annotation is SecretStr:
        return "string, *secret*"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _constraints(field: FieldInfo) -> list[str]:
    found: list[str] = []
    for item in field.metadata:
        if isinstance(item, Ge):
            found.append(f">= {item.ge}")
        elif isinstance(item, Gt):
            found.append(f"> {item.gt}")
        elif isinstance(item, Le):
            found.append(f"<= {item.le}")
        elif isinstance(item, Lt):
            found.append(f"< {item.lt}")
        elif isinstance(item, MinLen):
            found.append(f"at least {item.min_length}")
        elif isinstance(item, MaxLen):
            found.append(f"at most {item.max_length}")
        elif getattr(item, "pattern", None):
            found.append(f"matches `{item.pattern}`")
    return found


def _human_bytes(value: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size and value % size == 0:
            return f" ({value // size} {unit})"
    return ""


def _default(name: str, field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True, validated_data={})
    if value is None or value is PydanticUndefined:
        return "unset"
    if isinstance(value, BaseModel):
        return "see below"
    shown = f"`{json.dumps(value)}`"
    if isinstance(value, int) and not isinstance(value, bool) and name.endswith("_bytes"):
        shown += _human_bytes(value)
    return shown


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The config section a field holds, directly or inside ``X | None`` / ``dict[..., X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def _section_path(path: str, annotation: Any) -> str:
    """``restore.offset_ranges`` holds sections under two map keys: name them in the heading."""
    if typing.get_origin(annotation) is dict:
        inner = typing.get_args(annotation)[1]
        return _section_path(f"{path}.<{_type_name(typing.get_args(annotation)[0])}>", inner)
    return path


def _render_section(
    path: str, model: type[BaseModel], documented: dict[type[BaseModel], str], lines: list[str]
) -> None:
    documented[model] = path
    lines += [f"## `{path}`" if path else "## Top level", ""]
    doc = inspect.cleandoc(model.__doc__ or "").replace("``", "`")
    if doc and path:
        lines += [doc, ""]
    lines += ["| key | type | default | description |", "|---|---|---|---|"]
    nested: list[tuple[str, type[BaseModel]]] = []
    for name, field in model.model_fields.items():
        kind = _type_name(field.annotation)
        limits = _constraints(field)
        if limits:
            kind += f" ({', '.join(limits)})"
        description = field.description or ""
        section = _nested_model(field.annotation)
        if section is not None:
            child = _section_path(f"{path}.{name}" if path else name, field.annotation)
            earlier = documented.get(section)
            if earlier is not None:
                description += f" Same keys as [`{earlier}`](#{_anchor(earlier)})."
            else:
                nested.append((child, section))
                description += f" Keys: [`{child}`](#{_anchor(child)})."
        lines.append(f"| `{name}` | {_cell(kind)} | {_cell(_default(name, field))} | {_cell(description)} |")
    lines.append("")
    for child, section in nested:
        if section not in documented:
            _render_section(child, section, documented, lines)


def _anchor(path: str) -> str:
    """GitHub's heading anchor of ``## `path` ``."""
    return "".join(ch for ch in path.lower() if ch.isalnum() or ch in "-_ ").replace(" ", "-")


#: Environment variables kafka-backup itself reads: (name, effect).
ENVIRONMENT_VARIABLES: list[tuple[str, str]] = [
    (
        "`KBACKUP_CACHE_DIR`",
        "where Kafka's jars and Spark's Ivy cache are kept "
        "(default `$XDG_CACHE_HOME/kafka-backup`, else `~/.cache/kafka-backup`)",
    ),
    (
        "`KBACKUP_MAVEN_REPOSITORY`",
        "Maven repository Spark's Kafka source is resolved from (default Maven Central), e.g. a mirror",
    ),
    ("`KBACKUP_NO_PROGRESS`, `CI`", "when set, no progress bars are drawn (as `--no-progress`)"),
]


def render_config_reference() -> str:
    lines = [_INTRO, "## Which command reads which section", "", "| command | sections |", "|---|---|"]
    lines += [f"| `{command}` | {sections} |" for command, sections in COMMAND_SECTIONS]
    lines.append("")
    _render_section("", KBackupConfig, {}, lines)
    lines += [
        "## Environment variables",
        "",
        "Besides `${NAME}` references in config files, kafka-backup reads:",
        "",
    ]
    lines += [
        "| variable | effect |",
        "|---|---|",
        *(f"| {name} | {effect} |" for name, effect in ENVIRONMENT_VARIABLES),
    ]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(render_config_reference(), end="")
