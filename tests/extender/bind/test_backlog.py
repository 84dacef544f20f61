"""Filter holds kube-scheduler while too many binds are pending, and never longer than its bound."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.extender.factory import FakeApi, node
from webhook.extender import app as app_mod
from webhook.extender.bind.backlog import BindBacklog
from webhook.extender.bind.binder import Binder
from webhook.extender.cache import Cache
from webhook.extender.settings import ExtenderSettings
from webhook.extender.wire import BindingArgs
from webhook.serving.server import AppServer, ServeOptions


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


class _HeldBinder(Binder):
    """Binds that wait for `release`, then fail as `outcome` says: "" (bound), an error, or raise."""

    def __init__(self, outcome: str) -> None:
        cache = Cache()
        cache.nodes_resync([node("n1", 16)])
        cache.pods_resync([])
        super().__init__(cache, FakeApi(), ExtenderSettings())
        self.outcome = outcome
        self.release = threading.Event()

    def bind(self, args: BindingArgs) -> str:
        self.release.wait(10)
        if self.outcome == "raise":
            raise RuntimeError("a bug in bind")
        return self.outcome


def _metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith(f"gpushare_extender_{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} in /metrics")


BIND_ARGS = {"PodName": "a", "PodNamespace": "default", "PodUID": "u", "Node": "n1"}
FILTER_ARGS = {"Pod": {}, "NodeNames": ["n1"]}


@pytest.mark.parametrize("outcome", ["", "no room", "raise", "follower", "client leaves"])
def test_a_bind_however_it_ends_leaves_nothing_pending_and_filter_waits_its_bound_at_most(outcome):
    binder = _HeldBinder({"no room": "node n1: no room", "raise": "raise"}.get(outcome, ""))
    settings = ExtenderSettings(bind_backlog=0, filter_wait_s=0.3)
    leadership = app_mod.Leadership(is_leader=lambda: outcome != "follower")
    ext = app_mod.ExtenderApp(binder.cache, binder, settings, leadership)
    with AppServer(app_mod.build_app(ext), ServeOptions(host="127.0.0.1", port=0)) as server:
        with httpx.Client(base_url=server.url, timeout=10) as client, ThreadPoolExecutor(1) as pool:
            bound = pool.submit(client.post, "/gpushare-scheduler/bind", json=BIND_ARGS)
            deadline = time.monotonic() + 5
            while _metric(server.url, "binds_pending") != 1 and outcome != "follower":
                assert time.monotonic() < deadline, "the bind was never counted as pending"
                time.sleep(0.01)
            if outcome == "client leaves":
                leaving = socket.create_connection(("127.0.0.1", server.port))
                body = json.dumps(BIND_ARGS).encode()
                head = f"POST /gpushare-scheduler/bind HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}"
                leaving.sendall(head.encode() + b"\r\n\r\n" + body)
                while _metric(server.url, "binds_pending") != 2:
                    assert time.monotonic() < deadline, "the second bind was never counted as pending"
                    time.sleep(0.01)
                leaving.close()  # mid-bind; the bind itself goes on in its thread
            started = time.monotonic()
            filtered = httpx.post(server.url + "/gpushare-scheduler/filter", json=FILTER_ARGS, timeout=5)
            waited = time.monotonic() - started
            assert filtered.status_code == 200
            assert waited < 1.0  # filter_wait_s is 0.3
            if outcome != "follower":
                assert waited >= 0.29
            binder.release.set()
            with contextlib.suppress(httpx.HTTPError):
                bound.result(10)
        deadline = time.monotonic() + 5
        while _metric(server.url, "binds_pending") != 0:
            assert time.monotonic() < deadline, "a finished bind is still counted as pending"
            time.sleep(0.01)
        started = time.monotonic()
        httpx.post(server.url + "/gpushare-scheduler/filter", json=FILTER_ARGS, timeout=5)
        assert time.monotonic() - started < 0.25  # nothing pending: no wait
