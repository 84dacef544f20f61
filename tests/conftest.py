"""Shared fixtures: `apiserver`, the local Kubernetes API stand-in (tests/standins/apiserver.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.standins.apiserver import ApiServer


@pytest.fixture
def apiserver() -> Iterator[ApiServer]:
    """A started API stand-in with a ready client (`.api`, `.core`); stopped and cleaned up after the test."""
    server = ApiServer(bookmark_interval=0.2).start()
    try:
        yield server
    finally:
        server.stop()
