"""webhook.kube.asyncdirect: the event loop's keep-alive connections the extender binds over, against
the API stand-in (plain HTTP, faults on demand) and a small HTTPS server (the client library's TLS
settings); on asyncio's loop and on uvloop, which the extender runs."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import kubernetes.client
import pytest
import uvloop

from tests.kube.conftest import configured, instances
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import asyncdirect, errors, pods

T = TypeVar("T")


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest, monkeypatch) -> Callable[[Coroutine[Any, Any, T]], T]:
    """Run a coroutine on a new loop of the kind; the clients made so far are closed on that loop after
    it (a transport left open makes uvloop's close hang when its ResourceWarning is an error)."""
    factory = asyncio.new_event_loop if request.param == "asyncio" else uvloop.new_event_loop
    made = instances(monkeypatch, asyncdirect.AsyncDirectClient)

    async def closing(coroutine: Coroutine[Any, Any, T]) -> T:
        try:
            return await coroutine
        finally:
            for client in made:
                client.close()

    def run_on_loop(coroutine: Coroutine[Any, Any, T]) -> T:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(closing(coroutine))

    return run_on_loop


async def bind(
    client: asyncdirect.AsyncDirectClient, pod: dict[str, Any], node: str = "n1", **notes: str
) -> None:
    meta = pod["metadata"]
    path, body = pods.binding(meta["namespace"], meta["name"], meta["uid"], node, notes)
    pods.check_binding(await client.request("POST", path, body))


def client_of(api: Any) -> asyncdirect.AsyncDirectClient:
    client = asyncdirect.AsyncDirectClient.of(api)
    assert client is not None
    return client


def test_a_binding_lands_and_the_connection_is_kept_for_the_next(apiserver: ApiServer, run):
    client = client_of(apiserver.api)

    async def scenario() -> list[object]:
        seen: list[object] = []
        for name in ("p1", "p2", "p3"):
            await bind(client, apiserver.add_pod(name), ALIYUN_COM_GPU_MEM_IDX="1")
            seen.append(client._idle[-1])
        client.close()
        return seen

    seen = run(scenario())
    assert seen[0] is seen[1] is seen[2]  # one connection, reused
    stored = pods.get_pod(apiserver.api, "default", "p3")
    assert stored["spec"]["nodeName"] == "n1"
    assert stored["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"] == "1"
    assert apiserver.requests[("create", "pods/binding")] == 3


def test_concurrent_requests_each_get_a_connection_and_all_are_kept(apiserver: ApiServer, run):
    client = client_of(apiserver.api)
    bodies = [apiserver.add_pod(f"p{i}") for i in range(8)]

    async def scenario() -> int:
        await asyncio.gather(*(bind(client, p) for p in bodies))
        kept = len(client._idle)
        client.close()
        return kept

    assert 1 <= run(scenario()) <= 8
    assert all(pods.get_pod(apiserver.api, "default", f"p{i}")["spec"]["nodeName"] for i in range(8))


def test_a_request_answered_after_close_closes_its_connection_instead_of_keeping_it(
    apiserver: ApiServer, run
):
    """The app closes the client at shutdown while a watch's list may still be in flight: a connection
    kept after that would be open when the loop closes."""
    client = client_of(apiserver.api)
    pod = apiserver.add_pod("p1")
    apiserver.delay("create", "pods/binding", 0.3)
    opened: list[asyncdirect._Connection] = []
    real_open = client._open

    async def recording_open(protocol: Any) -> asyncdirect._Connection:
        opened.append(await real_open(protocol))
        return opened[-1]

    client._open = recording_open  # type: ignore[method-assign]

    async def scenario() -> int:
        binding = asyncio.ensure_future(bind(client, pod))
        await asyncio.sleep(0.1)  # sent, not yet answered
        client.close()
        await binding
        return len(client._idle)

    assert run(scenario()) == 0
    assert len(opened) == 1
    assert opened[0].closed
    assert pods.get_pod(apiserver.api, "default", "p1")["spec"]["nodeName"] == "n1"  # it did land


@pytest.mark.parametrize(
    ("prepare", "error", "text"),
    [("assigned", errors.ConflictError, "already assigned"), ("gone", errors.NotFoundError, "not found")],
)
def test_refusals_are_the_typed_errors_of_bind_pod(apiserver: ApiServer, run, prepare, error, text):
    pod = apiserver.add_pod("p1")
    if prepare == "assigned":
        apiserver.edit("pods", "p1", {"spec": {"nodeName": "n0"}}, "default")
    else:
        apiserver.remove("pods", "p1", "default")
    with pytest.raises(error, match=text) as info:
        run(bind(client_of(apiserver.api), pod))
    assert not info.value.retryable


def test_a_get_of_a_missing_pod_is_not_found_and_of_a_pod_is_the_pod(apiserver: ApiServer, run):
    apiserver.add_pod("p1")
    client = client_of(apiserver.api)

    async def scenario() -> Any:
        got = await client.request("GET", "/api/v1/namespaces/default/pods/p1")
        with pytest.raises(errors.NotFoundError):
            await client.request("GET", "/api/v1/namespaces/default/pods/nope")
        client.close()
        return got

    assert run(scenario())["metadata"]["name"] == "p1"


def test_a_server_error_is_retryable_and_the_next_request_goes_through(apiserver: ApiServer, run):
    pod = apiserver.add_pod("p1")
    apiserver.fail_next("create", "pods/binding", status=500)
    client = client_of(apiserver.api)

    async def scenario() -> errors.ApiError:
        with pytest.raises(errors.ApiError) as info:
            await bind(client, pod)
        await bind(client, pod)
        client.close()
        return info.value

    failure = run(scenario())
    assert failure.retryable and failure.reason == "InternalError"
    assert pods.get_pod(apiserver.api, "default", "p1")["spec"]["nodeName"] == "n1"


def test_a_connection_the_server_closed_while_idle_is_not_reused(apiserver: ApiServer, run):
    client = client_of(apiserver.api)

    async def scenario() -> None:
        await bind(client, apiserver.add_pod("p1"))
        kept = client._idle[-1]
        await asyncio.to_thread(apiserver.restart)  # every connection cut; same port
        for _ in range(100):  # the loop reads the EOF
            if kept.closed:
                break
            await asyncio.sleep(0.01)
        assert kept.closed
        await bind(client, apiserver.add_pod("p2"))  # no error: the closed one was not taken
        client.close()

    run(scenario())
    assert pods.get_pod(apiserver.api, "default", "p2")["spec"]["nodeName"] == "n1"


def test_no_server_is_a_retryable_unreachable_error(apiserver: ApiServer, run):
    client = client_of(apiserver.api)
    pod = apiserver.add_pod("p1")
    apiserver.stop()
    with pytest.raises(errors.UnreachableError, match="cannot reach the API server") as info:
        run(bind(client, pod))
    assert info.value.retryable


def test_a_slow_reply_times_out_as_a_retryable_error_and_its_connection_is_dropped(apiserver: ApiServer, run):
    client = asyncdirect.AsyncDirectClient(apiserver.api, timeout=(1.0, 0.2))
    pod = apiserver.add_pod("p1")
    apiserver.delay("create", "pods/binding", 1.0)
    with pytest.raises(errors.UnreachableError, match="no answer within the timeout") as info:
        run(bind(client, pod))
    assert info.value.retryable
    assert client._idle == []  # its late reply must not be read as the next request's


def test_a_connection_that_never_completes_times_out(run):
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)
    with listener:  # accepts nothing: a TLS handshake to it never completes
        config = kubernetes.client.Configuration(host=f"https://127.0.0.1:{listener.getsockname()[1]}")
        client = asyncdirect.AsyncDirectClient(kubernetes.client.ApiClient(config), timeout=(0.3, 0.3))
        with pytest.raises(errors.UnreachableError, match="within the timeout"):
            run(client.request("POST", "/x", {}))


def test_a_reply_that_is_not_http_is_a_retryable_error(run):
    listener = socket.create_server(("127.0.0.1", 0))

    def garbage() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")

    serving = threading.Thread(target=garbage, daemon=True)
    serving.start()
    with listener:
        config = kubernetes.client.Configuration(host=f"http://127.0.0.1:{listener.getsockname()[1]}")
        client = asyncdirect.AsyncDirectClient(kubernetes.client.ApiClient(config), timeout=(2, 2))
        with pytest.raises(errors.ApiError, match="not HTTP") as info:
            run(client.request("POST", "/x", {}))
    assert info.value.retryable
    serving.join(5)


def test_a_header_with_a_line_break_is_refused_unsent(apiserver: ApiServer, run):
    client = client_of(apiserver.api)
    apiserver.api.user_agent = "gpushare\r\nX-Injected: 1"
    with pytest.raises(errors.ApiError, match="line break"):
        run(bind(client, apiserver.add_pod("p1")))
    assert apiserver.requests[("create", "pods/binding")] == 0


def test_a_proxied_configuration_or_a_bad_port_is_left_to_the_client_library():
    config = kubernetes.client.Configuration(host="https://10.0.0.1:6443")
    config.proxy = "http://proxy:3128"
    assert asyncdirect.AsyncDirectClient.of(kubernetes.client.ApiClient(config)) is None
    bad = kubernetes.client.Configuration(host="https://127.0.0.1:port")
    assert asyncdirect.AsyncDirectClient.of(kubernetes.client.ApiClient(bad)) is None


# --- TLS: the client library's settings, honoured (tests/kube/conftest.py's server) -----------------


def test_tls_uses_the_ca_client_certificate_token_and_server_name_configured(https_server, run):
    # apiserver.internal: the name the certificate has, not the address dialled
    config = configured(https_server, server_name="apiserver.internal", token="t0ken")
    client = client_of(kubernetes.client.ApiClient(config))
    reply = run(client.request("POST", "/api/v1/namespaces/default/pods/p/binding", {"kind": "Binding"}))
    assert reply["seen"] == {
        "body": {"kind": "Binding"},
        "authorization": "Bearer t0ken",
        "client": ["system:kube-scheduler"],
    }


def test_tls_checks_the_address_dialled_without_a_server_name(https_server, run):
    config = configured(https_server)
    client = client_of(kubernetes.client.ApiClient(config))
    with pytest.raises(errors.UnreachableError, match="IP address mismatch"):
        run(client.request("POST", "/x", {}))


@pytest.fixture(autouse=True)
def _collected() -> Iterator[None]:
    """A transport a test left open warns in that test, not in a later one."""
    yield
    gc.collect()
