"""SIGTERM and SIGINT set the stop event of a node agent."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from webhook.serving import stopsignals


@pytest.fixture
def handlers() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_signal_sets_the_event(handlers: None, sig: signal.Signals) -> None:
    stop = stopsignals.event()
    assert not stop.is_set()
    os.kill(os.getpid(), sig)
    assert stop.wait(5)
