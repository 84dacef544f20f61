"""A follower forwards bind to the leader over real HTTP(S): the leader's answer comes back verbatim, and
every way forwarding can fail becomes a clear Error (leader apps fed directly; a stub for broken leaders)."""

from __future__ import annotations

import datetime
import http.server
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.extender.factory import FakeApi, node, pod
from tests.standins.loopback import free_port
from webhook.extender import app as app_mod
from webhook.extender.bind import forward
from webhook.extender.bind.binder import Binder
from webhook.extender.cache import Cache
from webhook.extender.settings import ExtenderSettings
from webhook.serving import tls
from webhook.serving.server import AppServer, ServeOptions

PREFIX = "/gpushare-scheduler"
NOW = datetime.datetime.now(datetime.UTC)
# Odd spacing and key case: the leader must get these bytes, not a re-encoding.
BODY = b'{"podName": "a",  "PodNamespace":"default","PodUID":"uid-a","Node":"n1"}'


@dataclass
class Replica:
    """One extender app on its own server; `url_of_leader` is what its Lease would say."""

    ext: app_mod.ExtenderApp
    api: FakeApi
    server: AppServer
    leading: bool
    url_of_leader: str = ""

    def post_bind(self, body: bytes = BODY, headers: dict[str, str] | None = None) -> str:
        with httpx.Client(base_url=self.server.url, timeout=10, verify=False) as client:
            r = client.post(f"{PREFIX}/bind", content=body, headers=headers or {})
        assert r.status_code == 200
        error: str = r.json()["Error"]
        return error

    def metrics(self) -> str:
        with httpx.Client(base_url=self.server.url, timeout=5, verify=False) as client:
            return client.get("/metrics").text


@pytest.fixture
def replicas() -> Iterator[Callable[..., Replica]]:
    started: list[AppServer] = []

    def make(leading: bool, serving_tls: tls.TlsFiles | None = None, **settings_kw: Any) -> Replica:
        cache, api = Cache(), FakeApi()
        cache.nodes_resync([node("n1", 16), node("n2", 4)])
        pending = [pod("a", 5), pod("big", 8)]
        for p in pending:
            api.add(p)
        cache.pods_resync(pending)
        settings = ExtenderSettings(forward_timeout_s=0.5, **settings_kw)
        replica: Replica
        leadership = app_mod.Leadership(
            is_leader=lambda: leading, holder=lambda: "leader-0", leader_url=lambda: replica.url_of_leader
        )
        ext = app_mod.ExtenderApp(
            cache, Binder(cache, api, settings, sleep=lambda s: None), settings, leadership
        )
        server = AppServer(
            app_mod.build_app(ext), ServeOptions(host="127.0.0.1", port=0, tls=serving_tls), ext.readiness
        )
        server.start()
        started.append(server)
        replica = Replica(ext, api, server, leading)
        return replica

    try:
        yield make
    finally:
        for server in started:
            server.stop()


@dataclass
class Stub:
    """A broken leader: answers every POST with `status` and `body`, and records what it got."""

    status: int = 200
    body: bytes = b""
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)


@pytest.fixture
def stub() -> Iterator[tuple[Stub, str]]:
    state = Stub()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            state.got.append((dict(self.headers), data))
            self.send_response(state.status)
            self.send_header("Content-Length", str(len(state.body)))
            self.end_headers()
            self.wfile.write(state.body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def forwarded_count(replica: Replica, outcome: str) -> float:
    prefix = f'gpushare_extender_forwarded_binds_total{{outcome="{outcome}"}} '
    line = next(x for x in replica.metrics().splitlines() if x.startswith(prefix))
    return float(line.split()[-1])


def test_follower_forwards_the_exact_body_and_the_leader_binds(replicas):
    leader, follower = replicas(leading=True), replicas(leading=False)
    follower.url_of_leader = leader.server.url
    assert follower.post_bind() == ""
    (bound,) = leader.api.bound
    assert bound[:2] == ("default/a", "n1")
    assert follower.api.bound == []
    assert forwarded_count(follower, forward.BOUND) == 1
    assert 'gpushare_extender_requests_total{endpoint="bind",outcome="ok"} 1.0' in leader.metrics()
    assert 'gpushare_extender_requests_total{endpoint="bind",outcome="forwarded"} 1.0' in follower.metrics()


def test_forwarded_request_carries_the_body_verbatim_and_the_marker_header(replicas, stub):
    state, url = stub
    state.body = b'{"Error":""}'
    follower = replicas(leading=False)
    follower.url_of_leader = url
    assert follower.post_bind() == ""
    ((headers, data),) = state.got
    assert data == BODY
    assert headers[forward.FORWARDED_HEADER] == "1"
    assert headers["Content-Type"] == "application/json"


def test_the_leaders_refusal_comes_back_verbatim(replicas):
    leader, follower = replicas(leading=True), replicas(leading=False)
    follower.url_of_leader = leader.server.url
    too_big = b'{"PodName":"big","PodNamespace":"default","PodUID":"uid-big","Node":"n2"}'
    via_follower = follower.post_bind(too_big)
    assert via_follower == leader.post_bind(too_big)
    assert via_follower.startswith("node n2:")
    assert forwarded_count(follower, forward.REFUSED) == 1
    assert leader.api.bound == []


def test_unknown_leader_url_is_a_clear_error(replicas):
    follower = replicas(leading=False)
    error = follower.post_bind()
    assert error.startswith("this gpushare extender replica is not the leader (leader: leader-0)")
    assert f"URL is unknown (no {forward.LEADER_URL_ANNOTATION} annotation" in error
    assert error.endswith("; retry")
    assert forwarded_count(follower, forward.NO_LEADER_URL) == 1


@pytest.mark.parametrize(
    "url", ["ftp://x:1", "http://no-port", "http://x:99999"], ids=["scheme", "no-port", "port-range"]
)
def test_unusable_leader_url_is_a_clear_error(replicas, url):
    follower = replicas(leading=False)
    follower.url_of_leader = url
    assert f"the leader's URL {url!r} on the Lease is not usable" in follower.post_bind()


def test_a_lease_still_naming_this_replica_is_not_followed(replicas, stub):
    state, url = stub
    follower = replicas(leading=False, advertise_url=url)
    follower.url_of_leader = url
    assert "the Lease still names this replica's URL" in follower.post_bind()
    assert state.got == []


def test_unreachable_leader_is_a_clear_error(replicas):
    port = free_port()  # nothing listens there
    follower = replicas(leading=False)
    follower.url_of_leader = f"http://127.0.0.1:{port}"
    error = follower.post_bind()
    assert f"forwarding the bind to http://127.0.0.1:{port}{PREFIX}/bind: ConnectionRefusedError" in error
    assert "not the leader (leader: leader-0)" in error
    assert forwarded_count(follower, forward.UNREACHABLE) == 1


def _filter(replica: Replica, name: str, gib: int) -> list[str]:
    body = {"Pod": pod(name, gib), "NodeNames": ["n1", "n2"]}
    with httpx.Client(base_url=replica.server.url, timeout=10, verify=False) as client:
        passed: list[str] = client.post(f"{PREFIX}/filter", json=body).json()["NodeNames"]
    return passed


def test_a_bind_the_leader_could_not_take_leaves_no_nomination_counting(replicas):
    """The follower's filter counted the pod where it sent it; once the forwarded bind fails, kube-scheduler
    filters the pod again, so nothing of it may keep counting meanwhile."""
    follower = replicas(leading=False)
    follower.url_of_leader = f"http://127.0.0.1:{free_port()}"  # the leader's pod was just killed
    assert _filter(follower, "a", 5) == ["n1"]
    assert follower.ext.cache.nominated_allocation("default/a", "uid-a", "n1") is not None
    assert "ConnectionRefusedError" in follower.post_bind()
    assert follower.ext.cache.nominated_allocation("default/a", "uid-a", "n1") is None


def test_a_bind_the_leader_took_keeps_counting_until_the_watch_shows_it(replicas):
    leader, follower = replicas(leading=True), replicas(leading=False)
    follower.url_of_leader = leader.server.url
    assert _filter(follower, "a", 5) == ["n1"]
    assert follower.post_bind() == ""
    assert follower.ext.cache.nominated_allocation("default/a", "uid-a", "n1") is not None


def test_a_leader_that_never_answers_times_out_within_the_forward_timeout(replicas):
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshake; nobody ever reads or answers
        follower = replicas(leading=False)
        follower.url_of_leader = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        error = follower.post_bind()
        elapsed = time.monotonic() - started
    assert "no answer within 0.5 s" in error
    assert 0.4 < elapsed < 3


@pytest.mark.parametrize(
    ("status", "body", "says"),
    [
        (500, b"boom", "the leader answered HTTP 500: boom"),
        (404, b'{"Error":""}', "the leader answered HTTP 404"),
        (200, b"<html>", "the leader's reply is not an ExtenderBindingResult: <html>"),
        (200, b'{"Error": 5}', "not an ExtenderBindingResult"),
        (200, b'["Error"]', "not an ExtenderBindingResult"),
        (200, b"", "not an ExtenderBindingResult"),
        (200, b'{"Error":"' + b"x" * 70_000 + b'"}', "not an ExtenderBindingResult"),
    ],
    ids=["500", "404", "html", "error-not-string", "list", "empty", "oversized"],
)
def test_a_bad_reply_from_the_leader_is_a_clear_error(replicas, stub, status, body, says):
    state, url = stub
    state.status, state.body = status, body
    follower = replicas(leading=False)
    follower.url_of_leader = url
    error = follower.post_bind()
    assert says in error
    assert error.startswith("this gpushare extender replica is not the leader") and error.endswith("; retry")
    assert len(error) < 1000
    assert forwarded_count(follower, forward.BAD_REPLY) == 1


def test_a_forwarded_bind_reaching_a_follower_is_refused_not_forwarded_again(replicas, stub):
    state, url = stub
    follower = replicas(leading=False)
    follower.url_of_leader = url
    error = follower.post_bind(headers={forward.FORWARDED_HEADER: "1"})
    assert error == (
        "this gpushare extender replica is not the leader (leader: leader-0) "
        "and the bind was already forwarded once; retry"
    )
    assert state.got == []
    assert 'gpushare_extender_requests_total{endpoint="bind",outcome="not_leader"} 1.0' in follower.metrics()


def test_the_leader_binds_a_forwarded_request_as_any_other(replicas):
    leader = replicas(leading=True)
    assert leader.post_bind(headers={forward.FORWARDED_HEADER: "1"}) == ""
    assert len(leader.api.bound) == 1


def test_a_malformed_bind_is_answered_by_the_follower_itself(replicas, stub):
    state, url = stub
    follower = replicas(leading=False)
    follower.url_of_leader = url
    assert "not JSON" in follower.post_bind(b"{nope")
    assert state.got == []


@pytest.fixture
def leader_certs(tmp_path: Path) -> tls.CertDir:
    return tls.write_cert_dir(tmp_path / "leader", NOW, dns_names=["extender.example"], ip_addresses=[])


def test_https_leader_verified_with_the_forward_ca_and_server_name(replicas, leader_certs):
    leader = replicas(leading=True, serving_tls=leader_certs.serving)
    follower = replicas(
        leading=False, forward_ca=leader_certs.ca_cert, forward_server_name="extender.example"
    )
    follower.url_of_leader = leader.server.url
    assert follower.url_of_leader.startswith("https://127.0.0.1:")
    assert follower.post_bind() == ""
    assert len(leader.api.bound) == 1


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"forward_server_name": "extender.example"}, "CERTIFICATE_VERIFY_FAILED"),  # system store only
        ({"forward_ca": "CA"}, "CERTIFICATE_VERIFY_FAILED"),  # right CA, cert has no 127.0.0.1 SAN
        ({"forward_ca": "CA", "forward_server_name": "other.example"}, "CERTIFICATE_VERIFY_FAILED"),
        ({"forward_ca": "MISSING"}, "CA "),
    ],
    ids=["unknown-ca", "ip-not-in-cert", "wrong-name", "missing-ca-file"],
)
def test_https_leader_that_cannot_be_verified_gets_no_bind(replicas, leader_certs, tmp_path, kw, says):
    leader = replicas(leading=True, serving_tls=leader_certs.serving)
    paths = {"CA": leader_certs.ca_cert, "MISSING": tmp_path / "missing.pem"}
    follower = replicas(leading=False, **{k: paths.get(v, v) for k, v in kw.items()})
    follower.url_of_leader = leader.server.url
    error = follower.post_bind()
    assert says in error and "not the leader" in error
    assert leader.api.bound == []
    assert forwarded_count(follower, forward.UNREACHABLE) == 1


def test_the_forward_counter_lists_every_outcome_from_the_start(replicas):
    text = replicas(leading=False).metrics()
    for outcome in forward.OUTCOMES:
        assert f'gpushare_extender_forwarded_binds_total{{outcome="{outcome}"}} 0.0' in text


def test_json_of_the_leaders_reply_is_decoded_not_echoed(replicas, stub):
    state, url = stub
    state.body = json.dumps({"Error": "node n1: caf\u00e9 full"}).encode()
    follower = replicas(leading=False)
    follower.url_of_leader = url
    assert follower.post_bind() == "node n1: caf\u00e9 full"
