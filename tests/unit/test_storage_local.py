"""The storage contract, on a local folder (the same suite runs on S3 in tests/integration)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kbackup.core.errors import StorageError
from kbackup.storage import LocalStorage, check_key, open_storage
from tests.support.storage_contract import StorageContract


class TestLocalStorage(StorageContract):
    @pytest.fixture
    def storage(self, tmp_path: Path) -> LocalStorage:
        return LocalStorage(tmp_path / "backups")


@pytest.mark.parametrize(
    "key", ["../escape", "a/../../b", "/etc/passwd", "a//b", "a\\b", "", "a/./b", "bad key", "x/\0"]
)
def test_keys_cannot_escape_the_root(key: str) -> None:
    with pytest.raises(StorageError):
        check_key(key)


def test_open_storage_picks_backend(tmp_path: Path) -> None:
    assert isinstance(open_storage(str(tmp_path)), LocalStorage)
    local = open_storage(f"file://{tmp_path}/x")
    assert isinstance(local, LocalStorage)
    assert local.root == (tmp_path / "x").resolve()


def test_unwritable_folder_is_a_storage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StorageError, match="cannot create folder"):
        LocalStorage(blocker / "sub").check_writable()


def test_move_file_renames_on_the_same_filesystem(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "backups")
    source = tmp_path / "scratch.parquet"
    source.write_bytes(b"x" * 1000)
    inode = source.stat().st_ino
    storage.move_file("data/t/0/a.parquet", source)
    stored = storage.local_path("data/t/0/a.parquet")
    assert stored.stat().st_ino == inode  # moved, not copied
    assert not source.exists()


@pytest.fixture
def other_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A folder on another filesystem than ``tmp_path``: /dev/shm, else a tmpfs this test mounts (as
    root). Without either the test is an expected failure that says why, never a silent skip."""
    shm = Path("/dev/shm")
    if shm.is_dir() and shm.stat().st_dev != tmp_path.stat().st_dev:
        yield shm
        return
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)]
    if subprocess.run(mount, check=False, capture_output=True).returncode != 0:
        pytest.xfail("no second filesystem: /dev/shm is missing or on tmp's, and mounting a tmpfs failed")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=False)


def test_move_file_copies_across_filesystems(tmp_path: Path, other_filesystem: Path) -> None:
    other = other_filesystem
    storage = LocalStorage(tmp_path / "backups")
    source = other / f"kbackup-test-{tmp_path.name}.parquet"
    source.write_bytes(b"y" * 1000)
    storage.move_file("data/t/0/b.parquet", source)
    assert storage.get_bytes("data/t/0/b.parquet") == b"y" * 1000
    assert not source.exists()
    assert not list((tmp_path / "backups" / "data/t/0").glob(".tmp-*"))


def test_a_folder_in_place_of_an_object_is_a_storage_error_naming_it(tmp_path: Path) -> None:
    """Root is not stopped by permissions; a folder where an object is to be read, written or
    deleted is: each call fails with one StorageError naming the path, never an OSError."""
    storage = LocalStorage(tmp_path / "backups")
    obstacle = storage.local_path("data/t/0/a.parquet")
    obstacle.mkdir(parents=True)
    scratch = tmp_path / "scratch.parquet"
    scratch.write_bytes(b"z")
    calls: dict[str, Callable[[], object]] = {
        "delete": lambda: storage.delete("data/t/0/a.parquet"),
        "download": lambda: storage.download("data/t/0/a.parquet", tmp_path / "copy"),
        "get_bytes": lambda: storage.get_bytes("data/t/0/a.parquet"),
        "put_bytes": lambda: storage.put_bytes("data/t/0/a.parquet", b"x"),
        "move_file": lambda: storage.move_file("data/t/0/a.parquet", scratch),
    }
    for name, call in calls.items():
        with pytest.raises(StorageError, match=f"{obstacle}.*Is a directory"):
            call()
        assert obstacle.is_dir(), name
    assert not list(obstacle.parent.glob(".tmp-*"))
    assert [info.key for info in storage.list()] == []


def test_a_file_in_place_of_a_keys_folder_means_no_object(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "backups")
    storage.put_bytes("data/t", b"an object, where data/t/0 needs a folder")
    assert storage.size("data/t/0/a.parquet") is None
    storage.delete("data/t/0/a.parquet")
    with pytest.raises(StorageError, match="cannot create folder"):
        storage.put_bytes("data/t/0/a.parquet", b"x")
