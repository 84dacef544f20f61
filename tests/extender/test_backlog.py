"""Filter holds kube-scheduler while too many binds are pending, and never longer than its bound."""

from __future__ import annotations

import asyncio
import time

from webhook.extender.backlog import BindBacklog


def test_under_the_limit_filter_does_not_wait() -> None:
    backlog = BindBacklog(limit=2, max_wait_s=1.0)
    backlog.started()
    backlog.started()
    assert asyncio.run(backlog.wait()) == 0.0


def test_filter_goes_on_as_soon_as_a_bind_finishes() -> None:
    async def scenario() -> tuple[float, int]:
        backlog = BindBacklog(limit=1, max_wait_s=5.0)
        for _ in range(3):
            backlog.started()
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, backlog.finished)
        loop.call_later(0.10, backlog.finished)
        waited = await backlog.wait()
        return waited, backlog.pending

    waited, pending = asyncio.run(scenario())
    assert 0.08 <= waited < 1.0
    assert pending == 1


def test_filter_waits_no_longer_than_max_wait_when_binds_do_not_finish() -> None:
    backlog = BindBacklog(limit=0, max_wait_s=0.2)
    backlog.started()
    started = time.monotonic()
    waited = asyncio.run(backlog.wait())
    assert 0.19 <= waited <= time.monotonic() - started < 1.0


def test_several_filters_waiting_all_go_on_when_the_backlog_drains() -> None:
    async def scenario() -> list[float]:
        backlog = BindBacklog(limit=0, max_wait_s=5.0)
        backlog.started()
        asyncio.get_running_loop().call_later(0.05, backlog.finished)
        return list(await asyncio.gather(backlog.wait(), backlog.wait()))

    assert all(0.04 <= w < 1.0 for w in asyncio.run(scenario()))
