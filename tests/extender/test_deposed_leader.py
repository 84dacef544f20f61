"""A replica that loses the Lease while a bind of it is retrying sends no more Bindings: leadership was
checked once, at the bind's start, and a retry seconds later landed while another replica bound from its
own cache, which did not count this pod. On threads and on the event loop alike."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.extender.factory import FakeApi, OnLoop, api_error, node, pod
from webhook.extender import app as app_mod
from webhook.extender.bind.binder import LOST_LEADERSHIP, Binder
from webhook.extender.cache import Cache
from webhook.extender.settings import ExtenderSettings
from webhook.serving.server import AppServer, ServeOptions


class LosingApi(FakeApi):
    """The first Binding times out (503); while it hangs, the Lease passes to another replica."""

    def __init__(self, leading: dict[str, bool]) -> None:
        super().__init__()
        self.leading = leading
        self.sent_while_not_leading = 0

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Any) -> None:
        if not self.leading["now"]:
            self.sent_while_not_leading += 1
        self.leading["now"] = False
        if not self.sent_while_not_leading:
            raise api_error(503, "etcdserver: request timed out")
        super().bind(namespace, name, uid, node, annotations)


@pytest.mark.parametrize("mode", ["threads", "loop"])
def test_a_replica_that_lost_the_lease_mid_bind_sends_no_more_bindings(mode: str) -> None:
    leading = {"now": True}
    cache, api = Cache(), LosingApi(leading)
    cache.nodes_resync([node("n1", 16)])
    a = pod("a", 5)
    api.add(a)
    cache.pods_resync([a])
    settings = ExtenderSettings()
    binder = Binder(cache, api, settings, sleep=lambda s: None)
    leadership = app_mod.Leadership(lambda: leading["now"], lambda: "other", lambda: "")
    loop_api = OnLoop(api) if mode == "loop" else None
    ext = app_mod.ExtenderApp(cache, binder, settings, leadership, loop_api=loop_api)
    server = AppServer(app_mod.build_app(ext), ServeOptions(host="127.0.0.1", port=0), ext.readiness)
    args = {"PodName": "a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "n1"}
    with server, httpx.Client(base_url=server.url, timeout=10) as client:
        reply = client.post("/gpushare-scheduler/bind", json=args).json()
    assert api.sent_while_not_leading == 0 and api.bound == []
    # The GET after the 503 showed the pod unbound: nothing landed, and nothing stays reserved here.
    assert reply["Error"] == f"binding pod default/a: {LOST_LEADERSHIP}"
    assert cache.assumed() == {}
