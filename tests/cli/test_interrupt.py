"""Ctrl-C in a real `gpushare inspect` process: exit 130, one line on stderr, no traceback (issue 13)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Background jobs start with SIGINT ignored, and Python then installs no handler: put back what an
# interactive shell gives, then run the real entry point.
CHILD = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from webhook.cli import main; sys.exit(main.main())"
)


def test_ctrl_c_while_inspect_waits_for_the_api_server_exits_130_without_a_traceback() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(60)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        argv = [sys.executable, "-c", CHILD, "inspect", "--server", url, "--timeout", "60"]
        with subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as proc:
            conn, _ = listener.accept()  # the request is sent: inspect now waits for an answer
            with conn:
                proc.send_signal(signal.SIGINT)
                out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert (out, err) == ("", "gpushare inspect: interrupted\n")  # stderr is a pipe: no progress line
