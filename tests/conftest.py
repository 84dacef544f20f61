"""Shared fixtures: `apiserver`, the local Kubernetes API stand-in
(webhook/devcluster/standin/apiserver.py), and logging isolation between tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

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
