"""The extender's HTTP API over real HTTP, with the exact JSON kube-scheduler sends (cache fed directly)."""

from __future__ import annotations

import http.client
import json
import statistics
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.extender.factory import FakeApi, OnLoop, node, pod
from tests.serving import scraped
from webhook.extender import app as app_mod
from webhook.extender import scheduling, wire
from webhook.extender.bind.binder import Binder
from webhook.extender.cache import Cache
from webhook.extender.settings import ExtenderSettings
from webhook.serving.server import AppServer, ServeOptions

PREFIX = "/gpushare-scheduler"


class Harness:
    def __init__(self, client: httpx.Client, ext: app_mod.ExtenderApp, api: FakeApi) -> None:
        self.client, self.ext, self.api = client, ext, api

    def post(self, verb: str, body: object | bytes) -> httpx.Response:
        if isinstance(body, bytes):
            return self.client.post(
                f"{PREFIX}/{verb}", content=body, headers={"Content-Type": "application/json"}
            )
        return self.client.post(f"{PREFIX}/{verb}", json=body)


@pytest.fixture(params=["threads", "loop"])
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """Binds on threads, or on the server's event loop as the extender binds with a loop API."""
    cache, api = Cache(), FakeApi()
    cache.nodes_resync([node("n1", 16, 8), node("n2", 4), node("sick", 16, unhealthy=(0,))])
    busy = pod("busy", 6, node_name="n1", placed={0: {1: 6}})
    pending = [pod("a", 5), pod("small", 2), pod("spready", 2, policy="spread")]
    for p in [busy, *pending]:
        api.add(p)
    cache.pods_resync([busy, *pending])
    settings = ExtenderSettings(max_body_bytes=64 * 1024)
    loop_api = OnLoop(api) if request.param == "loop" else None
    binder = Binder(cache, api, settings, sleep=lambda s: None)
    ext = app_mod.ExtenderApp(cache, binder, settings, loop_api=loop_api)
    server = AppServer(app_mod.build_app(ext), ServeOptions(host="127.0.0.1", port=0), ext.readiness)
    with server, httpx.Client(base_url=server.url, timeout=5) as client:
        yield Harness(client, ext, api)


def scheduler_args(p: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {"Pod": p, "Nodes": None, "NodeNames": names}


def test_filter_with_node_names_says_why_each_node_failed(harness):
    r = harness.post("filter", scheduler_args(pod("a", 5), ["n1", "n2", "sick", "ghost"]))
    assert r.status_code == 200
    assert r.json() == {
        "Nodes": None,
        "NodeNames": ["n1"],
        "FailedNodes": {
            "ghost": "node is not known to the gpushare extender yet (its watch has not shown it)",
        },
        # n2's only GPU is smaller than the pod: no preemption could make room there.
        "FailedAndUnresolvableNodes": {
            "n2": "even with no other pod on it: largest free GPU has 4 GiB, pod needs 5",
            "sick": "all 1 GPUs of the node are unhealthy",
        },
        "Error": "",
    }


def test_small_replies_on_a_kept_alive_connection_do_not_wait_for_a_delayed_ack(harness):
    # Headers and body leave in two writes; without TCP_NODELAY on the accepted socket Nagle holds the
    # body until the client's delayed ACK (~40 ms on Linux), and every scheduler call pays it.
    parts = urlsplit(str(harness.client.base_url))
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=5)
    body = json.dumps(scheduler_args(pod("small", 2), ["n1", "n2"])).encode()
    try:
        times = []
        for _ in range(15):
            started = time.perf_counter()
            conn.request("POST", f"{PREFIX}/prioritize", body, {"Content-Type": "application/json"})
            assert conn.getresponse().read()
            times.append(time.perf_counter() - started)
    finally:
        conn.close()
    assert statistics.median(times) < 0.025


def test_replies_are_utf8_json_that_decodes_to_the_same_text(harness):
    # kube-scheduler's encoding/json reads UTF-8 as JSON requires; no escapes needed.
    r = harness.post("filter", scheduler_args(pod("a", 5), ["n1", "nöde-ü"]))
    assert "nöde-ü".encode() in r.content
    assert r.headers["content-type"] == "application/json"
    assert r.json()["FailedNodes"] == {"nöde-ü": scheduling.UNKNOWN_NODE}


def test_filter_with_full_node_objects_returns_node_objects(harness):
    nodes = [node("n1", 16, 8), node("n2", 4)]
    r = harness.post(
        "filter", {"Pod": pod("a", 5), "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}
    )
    body = r.json()
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["n1"]
    assert body["NodeNames"] is None


def test_filter_of_a_pod_without_gpu_memory_passes_every_node(harness):
    r = harness.post("filter", scheduler_args(pod("cpu"), ["n1", "ghost"]))
    assert r.json()["NodeNames"] == ["n1", "ghost"]


def test_filter_of_an_unsplittable_multi_gpu_pod_is_unresolvable_everywhere(harness):
    body = harness.post("filter", scheduler_args(pod("x", 5, gpu_count=2), ["n1"])).json()
    assert "not a whole number of GiB per GPU" in body["FailedAndUnresolvableNodes"]["n1"]
    assert body["NodeNames"] == []


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"Pod": {}, "NodeNames": 5}', "NodeNames must be a list"),
        (b'{"Pod": "x"}', "Pod must be a JSON object"),
        (b"x" * (70 * 1024), "exceeds"),
    ],
    ids=["malformed", "array", "wrong-type", "pod-string", "too-large"],
)
def test_bad_filter_input_gets_http_200_with_error(harness, body, fragment):
    r = harness.post("filter", body)
    assert r.status_code == 200
    assert fragment in r.json()["Error"]
    assert r.json()["NodeNames"] is None


def test_prioritize_scores_binpack_and_spread(harness):
    r = harness.post("prioritize", scheduler_args(pod("small", 2), ["n1", "n2", "ghost"]))
    assert r.status_code == 200
    scores = {h["Host"]: h["Score"] for h in r.json()}
    assert set(r.json()[0]) == {"Host", "Score"}
    assert scores["ghost"] == 0
    # binpack: n1's GPU 1 has exactly 2 GiB free, a tighter fit than n2's 4 GiB GPU (core.placement.ranking)
    assert scores == {"n1": 10, "n2": 9, "ghost": 0}
    spread = {
        h["Host"]: h["Score"]
        for h in harness.post("prioritize", scheduler_args(pod("s", 2, policy="spread"), ["n1", "n2"])).json()
    }
    assert spread["n1"] > spread["n2"]
    assert all(0 <= s <= 10 for s in [*scores.values(), *spread.values()])


def test_bad_prioritize_input_gets_400_with_error(harness):
    r = harness.post("prioritize", b"{")
    assert r.status_code == 400
    assert "not JSON" in r.json()["Error"]


def test_bind_places_the_pod_and_inspect_shows_it(harness):
    r = harness.post("bind", {"PodName": "a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "n1"})
    assert r.status_code == 200
    assert r.json() == {"Error": ""}
    node_view = harness.client.get(f"{PREFIX}/inspect/n1").json()["nodes"][0]
    assert (node_view["totalGPU"], node_view["usedGPU"]) == (24, 11)
    assert [(d["id"], d["usedGPU"]) for d in node_view["devs"]] == [(0, 5), (1, 6)]
    assert node_view["devs"][0]["pods"][0]["name"] == "a"
    everything = harness.client.get(f"{PREFIX}/inspect").json()
    assert [n["name"] for n in everything["nodes"]] == ["n1", "n2", "sick"]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"nope", "not JSON"),
        (b'{"PodName": 1, "Node": "n1"}', "PodName must be a string"),
        (b'{"PodName": "a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "n2"}', "pod needs 5"),
        (b'{"PodName": "zzz", "PodNamespace": "default", "PodUID": "u", "Node": "n1"}', "not found"),
    ],
    ids=["malformed", "wrong-type", "does-not-fit", "unknown-pod"],
)
def test_bad_bind_gets_http_200_with_error(harness, body, fragment):
    r = harness.post("bind", body)
    assert r.status_code == 200
    assert fragment in r.json()["Error"]
    assert harness.api.bound == []


def test_follower_refuses_bind_but_answers_filter(harness):
    harness.ext.leadership.is_leader = lambda: False
    harness.ext.leadership.holder = lambda: "extender-0"
    r = harness.post("bind", {"PodName": "a", "PodNamespace": "default", "PodUID": "uid-a", "Node": "n1"})
    assert "not the leader (leader: extender-0)" in r.json()["Error"]
    assert harness.post("filter", scheduler_args(pod("a", 5), ["n1"])).json()["NodeNames"] == ["n1"]


def test_inspect_of_an_unknown_node_is_404(harness):
    r = harness.client.get(f"{PREFIX}/inspect/ghost")
    assert r.status_code == 404
    assert "ghost" in r.json()["error"]


def test_probes_version_and_metrics(harness):
    assert harness.client.get("/healthz").status_code == 200
    assert harness.client.get("/readyz").status_code == 200
    assert harness.client.get("/version").json()["nodes"] == 3
    harness.post("filter", scheduler_args(pod("a", 5), ["n1"]))
    text = harness.client.get("/metrics").text
    assert 'gpushare_extender_requests_total{endpoint="filter",outcome="ok"} 1.0' in text
    assert "gpushare_extender_leader 1.0" in text


def test_metrics_name_the_release_and_the_python_that_serve_them(harness):
    assert scraped.build_info(harness.client.get("/metrics").text) == scraped.THIS_BUILD


def test_wrong_method_is_405(harness):
    assert harness.client.get(f"{PREFIX}/filter").status_code == 405


def test_filter_refuses_a_unit_suffix_in_the_unit_the_extender_counts_in():
    # "3Gi" would be read as 3,221,225,472 units and the pod would wait forever: refused, with the fix.
    cache = Cache(unit="MiB")
    cache.nodes_resync([])
    cache.pods_resync([])
    p = pod("a", 1)
    p["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "3Gi"
    result = scheduling.filter_nodes(
        cache, wire.extender_args(scheduler_args(p, ["n1"])), ExtenderSettings().default_policy
    )
    assert result["NodeNames"] == []
    reason = (result["FailedAndUnresolvableNodes"] or {})["n1"]
    assert reason == (
        'spec.containers[0].resources.limits[aliyun.com/gpu-mem] (container "c0"): "3Gi": is read as '
        "3221225472 MiB: aliyun.com/gpu-mem is a plain number of MiB, with no unit suffix; "
        "fix: write 3072; the unit is MiB"
    )
