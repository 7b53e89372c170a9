"""The backup format (docs/format.md): record schema, object layout, manifests and segment files.

Shared by every stage that reads or writes backups. Versioned: readers refuse a
newer ``FORMAT_VERSION`` and ignore manifest fields they do not know.
"""

from kbackup.format.schema import FORMAT_NAME, FORMAT_VERSION, RECORD_SCHEMA

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "RECORD_SCHEMA"]
