"""webhook.kube.direct: the keep-alive connection per thread the extender binds over, against the API
stand-in (plain HTTP, faults on demand) and a small HTTPS server (the client library's TLS settings)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import kubernetes.client
import pytest

from tests.kube.conftest import configured, instances
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import direct, errors, pods
from webhook.serving import tls


@pytest.fixture(autouse=True)
def _closed(monkeypatch) -> Iterator[None]:
    """Every DirectClient a test makes is closed after it (its sockets would warn otherwise)."""
    made = instances(monkeypatch, direct.DirectClient)
    yield
    for client in made:
        client.close()


def bind(
    client: direct.DirectClient, pod: dict[str, Any], node: str = "n1", notes: dict[str, str] | None = None
) -> None:
    meta = pod["metadata"]
    path, body = pods.binding(meta["namespace"], meta["name"], meta["uid"], node, notes)
    pods.check_binding(client.request("POST", path, body))


def test_a_binding_sent_directly_lands_as_bind_pod_lands_it(apiserver: ApiServer):
    client = direct.DirectClient.of(apiserver.api)
    assert client is not None
    bind(client, apiserver.add_pod("p1", gpu_mem=[4]), notes={"ALIYUN_COM_GPU_MEM_IDX": "1"})
    stored = pods.get_pod(apiserver.api, "default", "p1")
    assert stored["spec"]["nodeName"] == "n1"
    assert stored["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"] == "1"
    assert apiserver.requests[("create", "pods/binding")] == 1


@pytest.mark.parametrize(
    ("prepare", "error", "text"),
    [
        ("assigned", errors.ConflictError, "already assigned"),
        ("gone", errors.NotFoundError, "not found"),
    ],
)
def test_refusals_are_the_typed_errors_of_bind_pod(apiserver: ApiServer, prepare, error, text):
    pod = apiserver.add_pod("p1")
    if prepare == "assigned":
        apiserver.edit("pods", "p1", {"spec": {"nodeName": "n0"}}, "default")
    else:
        apiserver.remove("pods", "p1", "default")
    client = direct.DirectClient(apiserver.api)
    with pytest.raises(error, match=text) as info:
        bind(client, pod)
    assert not info.value.retryable


def test_requests_of_a_thread_share_one_connection_and_threads_have_their_own(apiserver: ApiServer):
    client = direct.DirectClient(apiserver.api)
    for name in ("p1", "p2", "p3"):
        bind(client, apiserver.add_pod(name))
    first = client._local.conn
    assert first.sock is not None  # kept open between requests
    other: list[object] = []

    def in_a_thread() -> None:
        bind(client, apiserver.add_pod("p4"))
        other.append(client._local.conn)

    worker = threading.Thread(target=in_a_thread)
    worker.start()
    worker.join()
    assert other and other[0] is not first
    assert client._local.conn is first


def test_a_server_error_is_retryable_and_the_next_request_goes_through(apiserver: ApiServer):
    pod = apiserver.add_pod("p1")
    apiserver.fail_next("create", "pods/binding", status=500)
    client = direct.DirectClient(apiserver.api)
    with pytest.raises(errors.ApiError) as info:
        bind(client, pod)
    assert info.value.retryable and info.value.reason == "InternalError"
    bind(client, pod)
    assert pods.get_pod(apiserver.api, "default", "p1")["spec"]["nodeName"] == "n1"


def test_a_connection_the_server_closed_while_idle_is_replaced_before_use(apiserver: ApiServer):
    client = direct.DirectClient(apiserver.api)
    bind(client, apiserver.add_pod("p1"))
    apiserver.restart()  # every connection cut; same port
    bind(client, apiserver.add_pod("p2"))  # no error: the dead connection was noticed unsent
    assert pods.get_pod(apiserver.api, "default", "p2")["spec"]["nodeName"] == "n1"


def test_a_new_host_gets_a_new_connection(apiserver: ApiServer):
    client = direct.DirectClient(apiserver.api)
    bind(client, apiserver.add_pod("p1"))
    apiserver.restart(new_port=True)  # the stand-in points its clients at the new port
    bind(client, apiserver.add_pod("p2"))
    assert pods.get_pod(apiserver.api, "default", "p2")["spec"]["nodeName"] == "n1"


def test_no_server_is_a_retryable_unreachable_error_naming_the_cause(apiserver: ApiServer):
    client = direct.DirectClient(apiserver.api)
    pod = apiserver.add_pod("p1")
    apiserver.stop()
    with pytest.raises(errors.UnreachableError, match="cannot reach the API server") as info:
        bind(client, pod)
    assert info.value.retryable


def test_a_slow_reply_times_out_as_a_retryable_error(apiserver: ApiServer):
    client = direct.DirectClient(apiserver.api, timeout=(1.0, 0.2))
    pod = apiserver.add_pod("p1")
    apiserver.delay("create", "pods/binding", 1.0)
    with pytest.raises(errors.UnreachableError) as info:
        bind(client, pod)
    assert info.value.retryable


def test_a_proxied_configuration_is_left_to_the_client_library():
    config = kubernetes.client.Configuration(host="https://10.0.0.1:6443")
    config.proxy = "http://proxy:3128"
    assert direct.DirectClient.of(kubernetes.client.ApiClient(config)) is None


def test_a_header_http_client_refuses_leaves_no_half_sent_request_on_the_connection(apiserver: ApiServer):
    client = direct.DirectClient(apiserver.api)
    bind(client, apiserver.add_pod("p1"))  # a kept connection
    good = apiserver.api.user_agent
    apiserver.api.user_agent = "gpushare\nX-Injected: 1"  # http.client raises ValueError mid-request
    with pytest.raises(ValueError, match="Invalid header value"):
        bind(client, apiserver.add_pod("p2"))
    apiserver.api.user_agent = good
    bind(client, apiserver.add_pod("p3"))  # not CannotSendRequest: a transport error nothing explains
    assert pods.get_pod(apiserver.api, "default", "p3")["spec"]["nodeName"] == "n1"


@pytest.mark.parametrize("host", ["http://127.0.0.1:99999", "https://127.0.0.1:port"])
def test_a_host_url_with_a_bad_port_is_an_api_error_not_a_value_error(host):
    client = direct.DirectClient.of(kubernetes.client.ApiClient(kubernetes.client.Configuration(host=host)))
    assert client is not None
    with pytest.raises(errors.UnreachableError, match=r"cannot reach the API server.*[Pp]ort"):
        client.request("POST", "/x", {})


def test_an_idle_connection_on_a_descriptor_over_1023_is_not_taken_for_dead():
    ours, theirs = socket.socketpair()
    high = os.dup2(ours.fileno(), 1500)  # a busy process: select() cannot watch this descriptor
    with ours, theirs, socket.socket(fileno=high) as sock:
        assert not direct._closed_by_peer(sock)
        theirs.shutdown(socket.SHUT_WR)  # the server closes it
        assert direct._closed_by_peer(sock)


# --- TLS: the client library's settings, honoured --------------------------------------------------


def test_tls_uses_the_ca_client_certificate_token_and_server_name_configured(https_server):
    # apiserver.internal: the name the certificate has, not the address dialled
    config = configured(https_server, server_name="apiserver.internal", token="t0ken")
    client = direct.DirectClient.of(kubernetes.client.ApiClient(config))
    assert client is not None
    reply = client.request("POST", "/api/v1/namespaces/default/pods/p/binding", {"kind": "Binding"})
    assert reply["seen"] == {
        "body": {"kind": "Binding"},
        "authorization": "Bearer t0ken",
        "client": ["system:kube-scheduler"],
    }


def test_tls_checks_the_address_dialled_without_a_server_name(https_server):
    config = configured(https_server)
    client = direct.DirectClient(kubernetes.client.ApiClient(config))
    with pytest.raises(errors.UnreachableError, match="IP address mismatch"):
        client.request("POST", "/x", {})


def test_tls_refuses_a_server_its_ca_did_not_sign(https_server, tmp_path):
    other = tls.write_cert_dir(tmp_path / "other", datetime.now(UTC))
    config = configured(https_server, ca=other.ca_cert)
    client = direct.DirectClient(kubernetes.client.ApiClient(config))
    with pytest.raises(errors.UnreachableError, match="certificate verify failed"):
        client.request("POST", "/x", {})
