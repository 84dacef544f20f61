"""Shared fixtures: `apiserver`, the local Kubernetes API stand-in
(webhook/devcluster/standin/apiserver.py), and logging isolation between tests. Under CI (CI=true) a
skipped test counts as failed: there every test must run (helm, the kube binaries and the venv are
installed by scripts/test), so a missing tool cannot pass for a green suite."""

from __future__ import annotations

import logging
import os
from collections.abc import Generator, Iterator

import pytest

from webhook.devcluster.standin.apiserver import ApiServer


@pytest.fixture
def apiserver() -> Iterator[ApiServer]:
    """A started API stand-in with a ready client (`.api`, `.core`); stopped and cleaned up after the test."""
    server = ApiServer(bookmark_interval=0.2).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _isolated_logging() -> Iterator[None]:
    """CLI tests call `logs.configure`, which installs root handlers on the test's stderr; put the root
    logger back afterwards so a later test neither writes to a closed stream nor sees foreign lines."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                root.removeHandler(handler)
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.skipped and os.environ.get("CI"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI, where every test must run: {report.longrepr}"
    return report
