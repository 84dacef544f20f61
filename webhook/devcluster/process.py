"""A child program with its output in a log file, stopped with SIGTERM then SIGKILL.

Each child leads its own process group, so stopping it also stops what it started, and the log stays
on disk for the post-mortem of a failed test.
"""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path


class ProcessError(RuntimeError):
    """A child that exited early or never became ready; the message ends with its log's tail."""


class Process:
    def __init__(
        self, name: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.env = dict(env) if env is not None else None
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self._popen = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        return self._popen.pid if self._popen else -1

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def wait_until(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll `ready` until it is true; raise ProcessError if the child exits or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise ProcessError(f"{self.name} exited before {what}:\n{self.tail()}")
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise ProcessError(f"{self.name} not {what} after {timeout:.0f} s:\n{self.tail()}")

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM the group, SIGKILL after `grace` seconds; returns the exit status."""
        popen = self._popen
        if popen is None:
            return None
        if popen.poll() is None:
            _signal_group(popen.pid, signal.SIGTERM)
            try:
                popen.wait(grace)
            except subprocess.TimeoutExpired:
                _signal_group(popen.pid, signal.SIGKILL)
                popen.wait(5)
        return popen.returncode

    def kill(self) -> int | None:
        """SIGKILL the group at once, as a crash or a lost machine ends it: no handler runs."""
        popen = self._popen
        if popen is None:
            return None
        if popen.poll() is None:
            _signal_group(popen.pid, signal.SIGKILL)
            popen.wait(5)
        return popen.returncode

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus `extra`: children need PATH, HOME and the like."""
    return {**os.environ, **(extra or {})}


def dead(processes: Iterable[Process]) -> str:
    """The first child that exited, with its log's tail; "" while all run."""
    for process in processes:
        if not process.running():
            return f"{process.name} exited:\n{process.tail(15)}"
    return ""


def socket_dir(name: str) -> Path:
    """A new folder for a device plugin's sockets: under /tmp, because a unix socket path holds at most
    107 bytes and a workdir (pytest's above all) can be longer."""
    return Path(tempfile.mkdtemp(prefix=f"gpushare-dp-{name}-", dir="/tmp"))


def http_status(url: str, context: ssl.SSLContext | None) -> int:
    """The HTTP status of GET `url` (a readiness probe); OSError when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as reply:
            status: int = reply.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code
