"""A file system that loses what was not fsynced, to play power loss (after LazyFS).

``python -m tests.reliability.lazyfs BACKING MOUNT`` mounts BACKING at MOUNT through FUSE.
Reads see every write; only ``fsync``/``fdatasync`` copy a file's written pages (and its size)
to BACKING. Killing this process with SIGKILL is the power cut: whatever was written but not
synced is gone, as it would be from a disk's cache, and remounting BACKING shows what a
machine would find after rebooting.

Simplifications, which make it kinder than a real disk, never harsher: creating, renaming and
removing files reach BACKING at once (a real file system may lose those too without a sync of
the directory), and writes are lost whole pages at a time, never torn inside a page.

With ``LAZYFS_FAIL_FSYNC=FLAG`` in its environment, the sync of a SQLite WAL fails (EIO) while
the file FLAG exists (for its next N syncs, if it holds the number N): a disk that reports a
failed write-back.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

import mfusepy as fuse

PAGE = 4096
#: While a file of this name exists, every fsync of a SQLite WAL fails with EIO.
FAIL_FSYNC = os.environ.get("LAZYFS_FAIL_FSYNC", "")


def _sync_fails() -> bool:
    """Whether this sync fails: while FAIL_FSYNC exists; if it holds a number N, for the next
    N syncs only (then it is removed)."""
    try:
        with open(FAIL_FSYNC) as flag:
            left = flag.read().strip()
    except FileNotFoundError:
        return False
    if left:
        if int(left) <= 1:
            os.unlink(FAIL_FSYNC)
        else:
            with open(FAIL_FSYNC, "w") as flag:
                flag.write(str(int(left) - 1))
    return True


class Cached:
    """A file's current contents (as reads see them) and what differs from BACKING."""

    def __init__(self, data: bytes) -> None:
        self.data = bytearray(data)
        self.dirty: set[int] = set()  # page numbers written since the last sync
        self.resized = False


class LoseUnsynced(fuse.Operations):  # type: ignore[misc]
    use_ns = True  # times in nanoseconds (utimens is a no-op here anyway)

    def __init__(self, backing: str) -> None:
        self.backing = backing
        self.files: dict[str, Cached] = {}

    def _real(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def _cached(self, path: str) -> Cached:
        cached = self.files.get(path)
        if cached is None:
            with open(self._real(path), "rb") as f:
                cached = self.files[path] = Cached(f.read())
        return cached

    # -- metadata: straight to BACKING ---------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        try:
            st = os.lstat(self._real(path))
        except OSError as exc:
            raise fuse.FuseOSError(exc.errno) from None
        attrs = {
            key: getattr(st, key)
            for key in (
                "st_mode",
                "st_nlink",
                "st_uid",
                "st_gid",
                "st_size",
                "st_atime",
                "st_mtime",
                "st_ctime",
            )  # fmt: skip
        }
        if path in self.files:
            attrs["st_size"] = len(self.files[path].data)
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._real(path), amode):
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._real(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._real(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        os.mkdir(self._real(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        os.rmdir(self._real(path))
        return 0

    def unlink(self, path: str) -> int:
        os.unlink(self._real(path))
        self.files.pop(path, None)
        return 0

    def rename(self, old: str, new: str) -> int:
        os.rename(self._real(old), self._real(new))
        self.files.pop(new, None)
        if old in self.files:
            self.files[new] = self.files.pop(old)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._real(path))
        return {
            key: getattr(st, key)
            for key in (
                "f_bavail",
                "f_bfree",
                "f_blocks",
                "f_bsize",
                "f_favail",
                "f_ffree",
                "f_files",
                "f_flag",
                "f_frsize",
                "f_namemax",
            )  # fmt: skip
        }

    # -- data: in memory until a sync ----------------------------------------------------------

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        os.close(os.open(self._real(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
        self.files[path] = Cached(b"")
        return 0

    def open(self, path: str, flags: int) -> int:
        if not os.path.isfile(self._real(path)):
            raise fuse.FuseOSError(errno.ENOENT)
        if flags & os.O_TRUNC:
            self.truncate(path, 0)
        return 0

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return bytes(self._cached(path).data[offset : offset + size])

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        cached = self._cached(path)
        end = offset + len(data)
        if end > len(cached.data):
            cached.data.extend(b"\0" * (end - len(cached.data)))
            cached.resized = True
        cached.data[offset:end] = data
        cached.dirty.update(range(offset // PAGE, (end - 1) // PAGE + 1))
        return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        cached = self._cached(path)
        if length < len(cached.data):
            del cached.data[length:]
        else:
            cached.data.extend(b"\0" * (length - len(cached.data)))
        cached.resized = True
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        cached = self.files.get(path)
        if cached is None or not (cached.dirty or cached.resized):
            return 0
        if FAIL_FSYNC and path.endswith("-wal") and _sync_fails():
            # A disk that fails the sync: what was written stays where reads find it (as in a
            # page cache), not on BACKING — a power cut loses it, a crash of a program not.
            raise fuse.FuseOSError(errno.EIO)
        fd = os.open(self._real(path), os.O_WRONLY)
        try:
            for page in sorted(cached.dirty):
                start = page * PAGE
                os.pwrite(fd, cached.data[start : start + PAGE], start)
            os.ftruncate(fd, len(cached.data))
            os.fsync(fd)
        finally:
            os.close(fd)
        cached.dirty.clear()
        cached.resized = False
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        return 0  # directory changes reached BACKING already

    def flush(self, path: str, fh: int) -> int:
        return 0  # close() is not a sync

    def release(self, path: str, fh: int) -> int:
        return 0


def main() -> None:
    backing, mount = sys.argv[1], sys.argv[2]
    fuse.FUSE(LoseUnsynced(backing), mount, foreground=True, nothreads=True)


if __name__ == "__main__":
    main()
