"""A disk that fails to sync a commit (EIO from fsync): the batch's frames are in SQLite's WAL
already, and a crash would let recovery replay them. The daemon never says "nothing was
changed" of a batch that could still come back: it settles it first (a synced write of its
own takes the frames' place), or says that whether it was written is not known."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from colibri.core.errors import ColibriError, StorageUnavailable
from colibri.store import TaskFilter
from colibri.store.sqlite import SqliteStore
from tests.helpers import Daemon, wait_until, write_config
from tests.reliability.power_loss import LazyDisk, fuse_available
from tests.store.values import add, ids, make_task

pytestmark = pytest.mark.skipif(
    fuse_available() is not None, reason=f"a failing disk needs FUSE: {fuse_available()}"
)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[LazyDisk]:
    disk = LazyDisk(tmp_path / "disk", tmp_path / "mnt", fail_fsync=tmp_path / "fail-fsync")
    disk.attach()
    try:
        yield disk
    finally:
        disk.detach()


def _daemon(root: Path, disk: LazyDisk) -> Daemon:
    return Daemon(root, "--store", str(disk.mount / "colibri.sqlite"))


def _refusal(daemon: Daemon, text: str) -> ColibriError:
    with pytest.raises(ColibriError) as caught:
        daemon.call("submit", text=text, capabilities=["nobody"], idempotency_key=text)
    return caught.value


def _after_a_crash(daemon: Daemon, root: Path, disk: LazyDisk) -> set[str]:
    """SIGKILL the daemon (the disk keeps what it holds: no power cut), start another on the
    same board: the texts of the tasks it finds."""
    daemon.kill()
    again = _daemon(root, disk)
    again.start()
    try:
        return {t["text"] for t in again.call("list", limit=100)["tasks"]}
    finally:
        again.stop()


def test_a_sync_that_fails_once_is_settled_and_the_batch_truly_did_not_happen(
    root: Path, disk: LazyDisk
) -> None:
    write_config(root)
    daemon = _daemon(root, disk)
    daemon.start()
    daemon.call("submit", text="before", capabilities=["nobody"])
    assert disk.fail_fsync is not None
    disk.fail_fsync.write_text("1")  # the next sync of the WAL fails, then the disk recovers
    refused = _refusal(daemon, "refused")
    assert refused.code == "storage_unavailable"
    assert refused.message.endswith("nothing was changed"), refused.message
    assert daemon.task(daemon.call("list", limit=1)["tasks"][0]["id"])["text"] == "before"
    # Said "nothing was changed": a crash at once, before any other commit, must not bring it
    # back (SQLite's recovery would replay the frames the failed sync left in the WAL).
    assert _after_a_crash(daemon, root, disk) == {"before"}


def test_a_disk_that_keeps_failing_leaves_the_batch_in_doubt_until_it_can_write(
    root: Path, disk: LazyDisk
) -> None:
    write_config(root)
    daemon = _daemon(root, disk)
    daemon.start()
    daemon.call("submit", text="before", capabilities=["nobody"])
    assert disk.fail_fsync is not None
    disk.fail_fsync.touch()  # every sync fails until the file goes
    doubt = _refusal(daemon, "in doubt")
    assert doubt.code == "storage_unavailable"
    assert "whether it was written is not known" in doubt.message, doubt.message
    assert "nothing was changed" not in doubt.message
    # The board is not read again, nor written, while the batch could still come back.
    assert _refusal(daemon, "meanwhile").code == "storage_unavailable"
    assert daemon.call("ping")["pong"]
    disk.fail_fsync.unlink()
    started = time.monotonic()
    wait_until(lambda: _submitted(daemon, "once the disk writes"), timeout=10)
    assert time.monotonic() - started < 5  # it settles by itself, at the next sweep
    # Settled, the batch in doubt did not happen: a crash does not bring it back.
    assert _after_a_crash(daemon, root, disk) == {"before", "once the disk writes"}


def _submitted(daemon: Daemon, text: str) -> bool:
    try:
        daemon.call("submit", text=text, capabilities=["nobody"], idempotency_key=text)
    except ColibriError:
        return False
    return True


def test_the_store_itself_settles_a_failed_sync_or_keeps_the_batch_in_doubt(
    disk: LazyDisk,
) -> None:
    """The same promise at the store's own level, in this process: each batch whose COMMIT's
    sync fails is settled by a synced write of the store's own, or, while the disk keeps
    failing, stays in doubt — refused, never read — until a rollback can settle it."""
    assert disk.fail_fsync is not None
    store = SqliteStore(str(disk.mount / "colibri.sqlite"))
    try:
        add(store, make_task("t1"))
        store.commit()
        disk.fail_fsync.write_text("1")  # the next sync fails, then the disk recovers
        add(store, make_task("t2"))
        with pytest.raises(StorageUnavailable, match="nothing was changed$"):
            store.commit()
        assert ids(store.list_tasks(TaskFilter())) == ["t1"]
        disk.fail_fsync.touch()  # every sync fails until the file goes
        add(store, make_task("t3"))
        with pytest.raises(StorageUnavailable, match="whether it was written is not known"):
            store.commit()
        with pytest.raises(StorageUnavailable, match="whether it was written is not known"):
            store.rollback()  # still failing: no read may see a batch a crash could replay
        disk.fail_fsync.unlink()
        store.rollback()  # the disk writes again: settled, the batch did not happen
        assert ids(store.list_tasks(TaskFilter())) == ["t1"]
        add(store, make_task("t4"))
        store.commit()
    finally:
        store.close()
    reopened = SqliteStore(str(disk.mount / "colibri.sqlite"))
    try:
        assert ids(reopened.list_tasks(TaskFilter())) == ["t1", "t4"]
    finally:
        reopened.close()
