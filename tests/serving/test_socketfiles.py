"""Socket file identity and the instance lock of the node agents' sockets."""

from __future__ import annotations

import stat
from pathlib import Path

from webhook.serving import socketfiles


def test_identity_is_none_when_gone_and_changes_when_the_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "plugin.sock"
    assert socketfiles.identity(path) is None
    path.write_text("first")
    first = socketfiles.identity(path)
    assert first is not None and socketfiles.identity(path) == first
    other = tmp_path / "other"
    other.write_text("second")  # made while the first exists: another inode
    other.replace(path)
    assert socketfiles.identity(path) not in (None, first)


def test_a_second_lock_on_the_same_file_is_refused_until_the_first_is_released(tmp_path: Path) -> None:
    path = tmp_path / "made" / ".plugin.lock"
    first = socketfiles.InstanceLock(path, 0o644)
    second = socketfiles.InstanceLock(path, 0o644)
    assert first.acquire() and first.acquire()  # again: still held, no second descriptor
    assert stat.S_IMODE(path.stat().st_mode) & 0o644 == 0o644
    assert not second.acquire()
    first.release()
    assert second.acquire()
    second.release()
    second.release()  # released already: nothing to do
