"""Run `gpushare demo` as a user does and find what it left behind.

Every child inherits the environment, so a marker variable set for one run finds its processes in
/proc, wherever they were reparented after the demo exited.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

# `gpushare`, with Ctrl-C handled as an interactive shell gives it: a background job (CI) starts with
# SIGINT ignored, and Python then installs no handler, so the Ctrl-C tests would wait in vain.
CHILD = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from webhook.cli import main; sys.exit(main.main())"
)
MARK = "GPUSHARE_DEMO_TEST_MARK"


class Demo:
    def __init__(self, *args: str, env: Mapping[str, str] | None = None) -> None:
        self.mark = uuid.uuid4().hex
        self.lines: list[str] = []
        self.err = ""
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, "demo", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, **(env or {}), MARK: self.mark},
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                self.finish()
                raise AssertionError(f"no {text!r} in the demo's output:\n{self.output}\n{self.err}")
            time.sleep(0.1)

    def finish(self, sig: signal.Signals | None = None, timeout: float = 60) -> int:
        """Send `sig` (if any), wait for the exit, keep stderr in `err`; the exit status."""
        if sig is not None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait(10)
        self._reader.join(5)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.err = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code

    def survivors(self) -> list[str]:
        """Command lines of the processes of this run still alive."""
        found = []
        needle = f"{MARK}={self.mark}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                continue  # gone meanwhile, or not ours
        return found

    def kill(self) -> None:
        """Last resort after a failed assertion, so a broken test does not leave a cluster running."""
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and entry.name != str(os.getpid()):
                try:
                    if f"{MARK}={self.mark}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                        os.kill(int(entry.name), signal.SIGKILL)
                except OSError:
                    continue
