"""The behaviour every storage backend must have; subclass with a ``storage`` fixture."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kbackup.core.errors import StorageError
from kbackup.storage import Storage


class StorageContract:
    def test_put_get_roundtrip_bytes(self, storage: Storage) -> None:
        payload = bytes(range(256)) * 10
        storage.put_bytes("backups/b1/manifest.json", payload)
        assert storage.get_bytes("backups/b1/manifest.json") == payload
        assert storage.size("backups/b1/manifest.json") == len(payload)
        assert storage.exists("backups/b1/manifest.json")

    def test_put_file_and_download(self, storage: Storage, tmp_path: Path) -> None:
        source = tmp_path / "segment.parquet"
        source.write_bytes(os.urandom(300_000))
        storage.put_file("data/t/0/seg-1.parquet", source)
        copy = tmp_path / "copy"
        storage.download("data/t/0/seg-1.parquet", copy)
        assert copy.read_bytes() == source.read_bytes()

    def test_move_file_stores_it_and_removes_the_local_file(self, storage: Storage, tmp_path: Path) -> None:
        source = tmp_path / "segment.parquet"
        payload = os.urandom(300_000)
        source.write_bytes(payload)
        storage.move_file("data/t/0/seg-2.parquet", source)
        assert not source.exists()
        assert storage.size("data/t/0/seg-2.parquet") == len(payload)
        copy = tmp_path / "copy"
        storage.download("data/t/0/seg-2.parquet", copy)
        assert copy.read_bytes() == payload

    def test_list_is_sorted_and_filtered_by_prefix(self, storage: Storage) -> None:
        for key in ["p/b", "p/a", "q/c", "p/sub/d"]:
            storage.put_bytes(key, key.encode())
        assert [info.key for info in storage.list("p/")] == ["p/a", "p/b", "p/sub/d"]
        assert {info.key: info.size for info in storage.list("q/")} == {"q/c": 3}

    def test_missing_object(self, storage: Storage) -> None:
        assert storage.size("nope") is None
        assert not storage.exists("nope")
        with pytest.raises(StorageError, match="nope"):
            storage.get_bytes("nope")

    def test_overwrite_replaces_whole_object(self, storage: Storage) -> None:
        storage.put_bytes("k", b"first version, longer")
        storage.put_bytes("k", b"second")
        assert storage.get_bytes("k") == b"second"

    def test_delete_is_idempotent(self, storage: Storage) -> None:
        storage.put_bytes("gone", b"x")
        storage.delete("gone")
        storage.delete("gone")
        assert storage.size("gone") is None

    def test_escaping_keys_refused_before_io(self, storage: Storage) -> None:
        with pytest.raises(StorageError, match="unsafe segment"):
            storage.put_bytes("../outside", b"x")

    def test_put_if_absent_never_overwrites(self, storage: Storage) -> None:
        assert storage.put_bytes_if_absent("m/00000000.json", b"first") is True
        assert storage.put_bytes_if_absent("m/00000000.json", b"second") is False
        assert storage.get_bytes("m/00000000.json") == b"first"
        assert [info.key for info in storage.list("m/")] == ["m/00000000.json"]

    def test_list_prefixes_gives_immediate_folders(self, storage: Storage) -> None:
        for key in ["b1/manifests/0.json", "b1/data/t/0/s.parquet", "b2/manifests/0.json", "top.txt"]:
            storage.put_bytes(key, b"x")
        assert storage.list_prefixes("") == ["b1", "b2"]
        assert storage.list_prefixes("b1/") == ["data", "manifests"]
        assert storage.list_prefixes("nope/") == []

    def test_check_writable_leaves_nothing(self, storage: Storage) -> None:
        storage.check_writable()
        assert list(storage.list("")) == []
