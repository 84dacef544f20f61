"""The unix socket files a node agent serves in the kubelet's folders: whether a file is still the one it
made (`identity`), and the lock file that keeps a second instance from serving (and deleting) them."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def identity(path: Path) -> tuple[int, int] | None:
    """Inode and mtime of `path`, None when it is gone: a changed identity means removed or replaced."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


class InstanceLock:
    """An exclusive flock on `path`, released by the kernel when the process dies, so a crashed instance
    never blocks the next one."""

    def __init__(self, path: Path, mode: int = 0o600) -> None:
        self.path = path
        self.mode = mode
        self._fd: int | None = None

    def acquire(self) -> bool:
        """Take the lock (again: a no-op); False when another process holds it."""
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, self.mode)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the flock
            self._fd = None
