"""docs/format.md's manifest example shows every field the backup writes (beyond test_format_doc.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from kbackup.backup.commit import manifest_settings
from kbackup.backup.settings import BackupSettings
from kbackup.format.manifest import ConsumerGroupsSnapshot, GroupOffset, GroupSnapshot, SourceInfo, TopicEntry

DOC = (Path(__file__).parents[2] / "docs" / "format.md").read_text()


def example() -> dict:  # type: ignore[type-arg]
    found = re.search(r"```json\n(.*?)\n```", DOC, re.DOTALL)
    assert found is not None
    data: dict = json.loads(found.group(1))  # type: ignore[type-arg]
    return data


def test_example_uses_every_field_of_the_nested_entries() -> None:
    raw = example()
    assert set(raw["topics"][0]) == set(TopicEntry.model_fields)
    assert set(raw["source"]) == set(SourceInfo.model_fields)
    assert set(raw["consumer_groups"]) == set(ConsumerGroupsSnapshot.model_fields)
    assert set(raw["consumer_groups"]["groups"][0]) == set(GroupSnapshot.model_fields)
    assert set(raw["consumer_groups"]["groups"][0]["offsets"][0]) == set(GroupOffset.model_fields)


def test_documented_settings_are_the_ones_the_writer_records() -> None:
    documented = re.search(r"- `settings`: .*? Keys: (.*?)\.\s", DOC, re.DOTALL)
    assert documented is not None
    keys = re.findall(r"`([a-z_]+)`", documented.group(1))
    for follow in (False, True):
        written = manifest_settings(BackupSettings(), follow=follow)
        assert list(written) == keys
    assert manifest_settings(BackupSettings(), follow=True)["mode"] == "follow"
