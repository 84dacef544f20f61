"""`gpushare inspect` when the API cannot answer: one line on stderr, no urllib3 text, a documented exit
code (1: the cluster could not be read; 2: the kubeconfig must be fixed first)."""

from __future__ import annotations

import contextlib
import http.server
import logging
import socket
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3
import yaml

from webhook.cli import exitcodes
from webhook.cli.inspect import command
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import client as kube_client


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = command.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and "urllib3" not in err and "MaxRetryError" not in err
    return err.rstrip("\n")


@pytest.fixture(autouse=True)
def outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(kube_client.IN_CLUSTER_ENV, raising=False)


@pytest.mark.parametrize(
    ("status", "resource", "line"),
    [
        (500, "pods", "gpushare inspect: injected fault 500 for list pods (HTTP 500)"),
        (403, "nodes", "gpushare inspect: injected fault 403 for list nodes (HTTP 403)"),
        (
            401,
            "nodes",
            "gpushare inspect: the API server did not accept the credentials (HTTP 401): check the "
            "kubeconfig's user, token or client certificate",
        ),
    ],
    ids=["server-error", "forbidden", "unauthorized"],
)
def test_an_api_refusal_exits_1_with_one_line(
    apiserver: ApiServer,
    capsys: pytest.CaptureFixture[str],
    status: int,
    resource: str,
    line: str,
) -> None:
    apiserver.add_node("n1", gpus=1, gpu_mem=16)
    apiserver.fail_next("list", resource, status=status)
    code, out, err = run(capsys, "--server", apiserver.url)
    assert (code, out) == (exitcodes.FAILURE, "")
    assert one_line(err) == line


def test_an_unknown_node_exits_1_naming_it(apiserver: ApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--server", apiserver.url, "ghost")
    assert (code, out) == (exitcodes.FAILURE, "")
    assert one_line(err) == 'gpushare inspect: node "ghost" not found'


def test_a_404_that_is_not_the_api_servers_says_the_address_may_be_wrong(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # What a wrong path in --server (or a proxy in front of nothing) answers: no NotFound Status.
    class NotHere(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "18")
            self.end_headers()
            self.wfile.write(b"404 page not found")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotHere)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/not-the-api"
        code, out, err = run(capsys, "--server", url, "gpu-node-1")
    finally:
        server.shutdown()
        server.server_close()
    assert (code, out) == (exitcodes.FAILURE, "")
    assert one_line(err) == (
        f'gpushare inspect: {url} answered 404 for node "gpu-node-1" without the API server\'s NotFound '
        "status: is that the API server's address?"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_refused_connection_exits_1_saying_where_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, _, err = run(capsys, "--server", url, "--timeout", "2")
    assert code == exitcodes.FAILURE
    assert one_line(err) == f"gpushare inspect: cannot reach the API server at {url}: connection refused"


@pytest.fixture
def hanging_up() -> Iterator[tuple[str, list[int]]]:
    """A server that accepts each connection and closes it at once; counts the connections."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(); close() alone does not
        listener.close()
        thread.join(timeout=5)


def test_a_broken_connection_is_tried_once_not_retried(
    hanging_up: tuple[str, list[int]], capsys: pytest.CaptureFixture[str]
) -> None:
    # urllib3 would retry three times by default, logging a warning each time; inspect fails after one
    # try (one --timeout at most) and says so once.
    url, accepted = hanging_up
    code, _, err = run(capsys, "--server", url, "--timeout", "5")
    assert code == exitcodes.FAILURE
    assert one_line(err).startswith(f"gpushare inspect: cannot reach the API server at {url}: connection")
    assert len(accepted) == 1


def kubeconfig(path: Path, context: str = "dev") -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
                "current-context": context,
            }
        )
    )
    return path


def test_a_missing_kubeconfig_file_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "--kubeconfig", str(tmp_path / "nope"))
    assert code == exitcodes.USAGE
    assert one_line(err) == (
        f"gpushare inspect: cannot configure the Kubernetes client: no kubeconfig at {tmp_path / 'nope'}"
    )


def test_no_kubeconfig_anywhere_names_the_kubeconfig_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = f"{tmp_path / 'a'}:{tmp_path / 'b'}"
    monkeypatch.setenv(kube_client.KUBECONFIG_ENV, missing)
    code, _, err = run(capsys)
    assert code == exitcodes.USAGE
    assert one_line(err).endswith(f"no kubeconfig at {missing} ($KUBECONFIG)")


def test_an_unknown_context_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--kubeconfig", str(kubeconfig(tmp_path / "config")), "--context", "prod")
    assert code == exitcodes.USAGE
    assert one_line(err).startswith("gpushare inspect: cannot configure the Kubernetes client:")
    assert "prod" in err


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"garbage: [\n", "invalid YAML (line 2, column 1): while parsing a flow node: expected the node"),
        (b"- a\n- b\n", "not a kubeconfig: the YAML is a list, not a mapping"),
        (b"just text\n", "not a kubeconfig: the YAML is a string, not a mapping"),
        (b"\xff\xfe", "not UTF-8 text (byte 0)"),
    ],
    ids=["invalid-yaml", "list", "string", "not-utf8"],
)
def test_a_kubeconfig_that_is_not_a_yaml_mapping_exits_2_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    content: bytes,
    problem: str,
) -> None:
    bad = tmp_path / "config"
    bad.write_bytes(content)
    code, _, err = run(capsys, "--kubeconfig", str(bad))
    assert code == exitcodes.USAGE
    assert one_line(err).startswith(
        f"gpushare inspect: cannot configure the Kubernetes client: {bad}: {problem}"
    )
    # The same through $KUBECONFIG, where a good file beside it does not hide the bad one.
    monkeypatch.setenv(kube_client.KUBECONFIG_ENV, f"{kubeconfig(tmp_path / 'good')}:{bad}")
    code, _, err = run(capsys)
    assert code == exitcodes.USAGE
    assert f"{bad}: {problem}" in one_line(err)


def test_the_http_library_says_nothing_of_its_own(
    apiserver: ApiServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # No retry warnings through logging, no InsecureRequestWarning for insecure-skip-tls-verify kubeconfigs.
    transport = logging.getLogger(kube_client.TRANSPORT_LOGGER)
    monkeypatch.setattr(transport, "level", transport.level)  # restored after the test
    assert run(capsys, "--server", apiserver.url)[0] == exitcodes.OK
    assert transport.getEffectiveLevel() == logging.ERROR
    warnings.warn("unverified", urllib3.exceptions.InsecureRequestWarning, stacklevel=1)  # errors if shown
