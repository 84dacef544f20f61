"""Extender replicas with leader election against the API stand-in: a bind sent to any replica is bound
once, by the leader found through its Lease annotation, also after leadership moves."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.extender.factory import pod
from tests.standins.loopback import free_port
from webhook.core.wire import resources
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.extender.bind import forward
from webhook.extender.service import Extender
from webhook.extender.settings import ExtenderSettings, LeaderSettings

PREFIX = "/gpushare-scheduler"
LEASE = "gpushare-extender"


@pytest.fixture
def replica(cluster: ApiServer) -> Iterator[Callable[[str], Extender]]:
    started: list[Extender] = []

    def start(identity: str) -> Extender:
        port = free_port()  # the advertised URL must be known before the server binds
        settings = ExtenderSettings(
            host="127.0.0.1",
            port=port,
            bind_backoff_s=0.01,
            advertise_url=f"http://127.0.0.1:{port}",
            leader=LeaderSettings(
                enabled=True,
                identity=identity,
                lease_name=LEASE,
                lease_namespace="default",
                lease_duration_s=2.0,
                renew_deadline_s=1.5,
                retry_period_s=0.05,
            ),
        )
        ext = Extender(settings, cluster.new_client()).start()
        started.append(ext)
        assert ext.wait_synced(10)
        return ext

    try:
        yield start
    finally:
        for ext in started:
            ext.stop()


def leads(ext: Extender) -> bool:
    return ext.elector is not None and ext.elector.is_leader()


def knows_leader(follower: Extender, leader: Extender) -> bool:
    assert follower.elector is not None
    notes = follower.elector.holder_annotations()
    return notes.get(forward.LEADER_URL_ANNOTATION) == leader.settings.advertise_url


def bind(ext: Extender, name: str, node_name: str) -> str:
    body = {"PodName": name, "PodNamespace": "default", "PodUID": f"uid-{name}", "Node": node_name}
    with httpx.Client(base_url=ext.url, timeout=10) as client:
        r = client.post(f"{PREFIX}/bind", json=body)
    assert r.status_code == 200
    error: str = r.json()["Error"]
    return error


def used(ext: Extender, name: str) -> list[int]:
    view = ext.cache.view(name)
    assert view is not None
    return [g.used for g in view.gpus]


def metric(ext: Extender, line: str) -> bool:
    with httpx.Client(base_url=ext.url, timeout=5) as client:
        return line in client.get("/metrics").text


def test_the_leader_publishes_its_url_on_the_lease(cluster, replica):
    a = replica("a")
    cluster.wait_for(lambda: leads(a), what="a leads")
    lease = cluster.get("leases", LEASE, "default")
    assert lease is not None
    assert lease["metadata"]["annotations"][forward.LEADER_URL_ANNOTATION] == a.settings.advertise_url


def test_bind_sent_to_the_follower_is_bound_once_by_the_leader(cluster, replica):
    a = replica("a")
    cluster.wait_for(lambda: leads(a), what="a leads")
    b = replica("b")
    cluster.put(pod("p", 5))
    cluster.wait_for(lambda: knows_leader(b, a), what="b knows a's URL")
    assert bind(b, "p", "n1") == ""
    stored = cluster.get("pods", "p", "default")
    assert stored is not None and stored["spec"]["nodeName"] == "n1"
    assert json.loads(stored["metadata"]["annotations"][resources.ANN_ALLOCATION]) == {"0": {"1": 5}}
    assert metric(a, 'gpushare_extender_requests_total{endpoint="bind",outcome="ok"} 1.0')
    assert metric(b, 'gpushare_extender_forwarded_binds_total{outcome="ok"} 1.0')
    assert b.cache.assumed() == {}  # the follower never reserved anything itself
    for ext in (a, b):  # both caches count the pod once, the follower through its watch
        cluster.wait_for(
            lambda ext=ext: used(ext, "n1") == [6, 5], what=f"{ext.settings.leader.identity} sees p"
        )
    cluster.wait_for(lambda: a.cache.assumed() == {}, what="leader's watch confirms the bind")
    assert used(a, "n1") == [6, 5]


def test_the_leaders_refusal_reaches_the_scheduler_through_the_follower(cluster, replica):
    a = replica("a")
    cluster.wait_for(lambda: leads(a), what="a leads")
    b = replica("b")
    cluster.put(pod("huge", 20))
    cluster.wait_for(lambda: knows_leader(b, a), what="b knows a's URL")
    error = bind(b, "huge", "n2")
    assert error == bind(a, "huge", "n2") != ""
    assert "not the leader" not in error
    assert cluster.get("pods", "huge", "default")["spec"].get("nodeName") is None


def test_binds_follow_the_leadership_when_the_leader_stops(cluster, replica):
    a = replica("a")
    cluster.wait_for(lambda: leads(a), what="a leads")
    b, c = replica("b"), replica("c")
    cluster.wait_for(lambda: knows_leader(b, a) and knows_leader(c, a), what="followers know a")
    cluster.put(pod("before", 2))
    cluster.put(pod("after", 3))
    assert bind(b, "before", "n2") == ""
    a.stop()  # releases the Lease: a follower takes over at once
    new = cluster.wait_for(lambda: next((x for x in (b, c) if leads(x)), None), what="a new leader")
    follower = c if new is b else b
    cluster.wait_for(lambda: knows_leader(follower, new), what="the follower learns the new URL")
    assert bind(follower, "after", "n2") == ""
    assert cluster.get("pods", "after", "default")["spec"]["nodeName"] == "n2"
    assert metric(new, 'gpushare_extender_requests_total{endpoint="bind",outcome="ok"} 1.0')
    forwarded = 2 if follower is b else 1  # b forwarded "before" too
    assert metric(follower, f'gpushare_extender_forwarded_binds_total{{outcome="ok"}} {forwarded}.0')
