"""No kubernetes-client, urllib3 or socket exception escapes webhook.kube: every failure is an ApiError."""

from __future__ import annotations

import socket

import kubernetes.client
import pytest
import urllib3

from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import errors, leader, pods, rest, watch


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def dead_api():
    config = kubernetes.client.Configuration(host=f"http://127.0.0.1:{closed_port()}")
    config.retries = 0
    api = kubernetes.client.ApiClient(config)
    try:
        yield api
    finally:
        api.close()


CALLS = {
    "get_pod": lambda api: pods.get_pod(api, "default", "p"),
    "get_node": lambda api: pods.get_node(api, "n"),
    "list_pods": pods.list_pods,
    "bind_pod": lambda api: pods.bind_pod(api, "default", "p", "uid", "n"),
    "patch_pod_annotations": lambda api: pods.patch_pod_annotations(api, "default", "p", {"a": "b"}),
    "patch_pod_annotations_uid": lambda api: pods.patch_pod_annotations(
        api, "default", "p", {"a": "b"}, uid="u"
    ),
    "patch_node_metadata": lambda api: pods.patch_node_metadata(api, "n", annotations={"a": "b"}),
    "patch_node_status": lambda api: pods.patch_node_status(api, "n", {"capacity": {}}),
    "create_event": lambda api: pods.create_event(api, {"kind": "Pod", "metadata": {"name": "p"}}, "R", "m"),
    "rest_request": lambda api: rest.request(api, "GET", "/api/v1/pods"),
    "rest_open_stream": lambda api: rest.open_stream(api, "/api/v1/pods", query={"watch": True}),
}


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
def test_transport_failures_become_retryable_api_errors(dead_api, call):
    with pytest.raises(errors.ApiError) as info:
        call(dead_api)
    assert info.value.status == errors.TRANSPORT and info.value.retryable
    assert not isinstance(info.value, urllib3.exceptions.HTTPError | kubernetes.client.ApiException | OSError)


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
def test_server_failures_become_api_errors_with_the_status(apiserver: ApiServer, call):
    apiserver.fail_next("*", "*", status=500, count=1)
    with pytest.raises(errors.ApiError) as info:
        call(apiserver.api)
    assert info.value.status == 500 and info.value.reason == "InternalError"
    assert "injected fault" in str(info.value)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (404, errors.NotFoundError),
        (409, errors.ConflictError),
        (410, errors.GoneError),
        (401, errors.UnauthorizedError),
        (403, errors.ForbiddenError),
        (500, errors.ApiError),
    ],
    ids=["404", "409", "410", "401", "403", "500"],
)
def test_status_codes_map_to_error_classes(apiserver: ApiServer, status, cls):
    apiserver.fail_next("get", "nodes", status=status)
    with pytest.raises(cls) as info:
        pods.get_node(apiserver.api, "n1")
    assert type(info.value) is cls and info.value.status == status


def test_leader_and_watch_swallow_transport_failures(dead_api):
    elector = leader.LeaderElector(dead_api, leader.LeaderSettings("ns", "l", "me", 1.0, 0.6, 0.05))
    assert not elector.try_acquire_or_renew()
    assert elector.last_error is not None and elector.last_error.status == errors.TRANSPORT
    assert not elector.release()
    watcher = watch.Watcher(
        dead_api,
        rest.path("pods"),
        settings=watch.WatchSettings(backoff=watch.Backoff(initial=0.01, maximum=0.02)),
    ).start()
    try:
        deadline_hit = not watcher.wait_synced(0.3)
        assert deadline_hit and watcher.stats.errors >= 2
        assert watcher.last_error is not None and watcher.last_error.retryable
    finally:
        watcher.stop()


@pytest.mark.parametrize(
    ("body", "reason", "message"),
    [
        (b'{"kind":"Status","code":409,"reason":"Conflict","message":"m"}', "Conflict", "m"),
        (b"not json at all", "Bad", "not json at all"),
        (b"", "Bad", "Bad"),
        (b"[1,2]", "Bad", "Bad"),
    ],
    ids=["status", "text", "empty", "not-an-object"],
)
def test_from_status_reads_whatever_the_server_sent(body, reason, message):
    error = errors.from_status(409, body, "Bad")
    assert isinstance(error, errors.ConflictError)
    assert (error.reason, error.message) == (reason, message)


def test_a_refused_connection_says_where_and_why_in_one_line(dead_api):
    with pytest.raises(errors.UnreachableError) as info:
        rest.request(dead_api, "GET", "/api/v1/nodes")
    host = dead_api.configuration.host
    assert info.value.message == f"cannot reach the API server at {host}: connection refused"
    assert "MaxRetryError" not in str(info.value) and "\n" not in str(info.value)


POOL = urllib3.HTTPSConnectionPool("api.example", 6443)
REFUSED = urllib3.exceptions.NewConnectionError(
    urllib3.connection.HTTPSConnection("api.example", 6443),
    "Failed to establish a new connection: [Errno 111] Connection refused",
)


@pytest.mark.parametrize(
    ("exc", "message"),
    [
        (
            urllib3.exceptions.MaxRetryError(POOL, "/api", REFUSED),
            "cannot reach the API server at https://api.example:6443: connection refused",
        ),
        (
            urllib3.exceptions.MaxRetryError(
                POOL, "/api", urllib3.exceptions.ConnectTimeoutError(POOL, "timed out")
            ),
            "cannot reach the API server at https://api.example:6443: no connection within the timeout",
        ),
        (
            urllib3.exceptions.ReadTimeoutError(POOL, "/api", "Read timed out."),
            "cannot reach the API server at https://api.example:6443: no answer within the timeout",
        ),
        (
            urllib3.exceptions.MaxRetryError(
                POOL, "/api", urllib3.exceptions.SSLError("certificate verify failed")
            ),
            "cannot reach the API server at https://api.example:6443: TLS failed: certificate verify failed",
        ),
        (
            urllib3.exceptions.ProtocolError(
                "Connection aborted.", ConnectionResetError(104, "Reset by peer")
            ),
            "cannot reach the API server: connection broken: reset by peer",
        ),
        (
            socket.gaierror(-2, "Name or service not known"),
            "cannot reach the API server: host name not resolved (name or service not known)",
        ),
    ],
    ids=["refused", "connect-timeout", "read-timeout", "tls", "reset", "dns"],
)
def test_transport_errors_are_worded_without_urllib3_text(exc, message):
    error = errors.from_exception(exc)
    assert isinstance(error, errors.UnreachableError) and error.status == errors.TRANSPORT
    assert error.message == message


def test_an_ipv6_api_server_is_named_in_brackets():
    pool = urllib3.HTTPSConnectionPool("[fd00::1]", 6443)
    refused = urllib3.exceptions.MaxRetryError(pool, "/api", REFUSED)
    assert errors.from_exception(refused).message == (
        "cannot reach the API server at https://[fd00::1]:6443: connection refused"
    )
