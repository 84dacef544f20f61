"""`gpushare ensure-certs`: arguments, exit codes, its JSON summary and its errors (what it does to the
cluster is `certsync.ensure`'s, tested in tests/kube/test_certsync*.py)."""

from __future__ import annotations

import base64
import json

import pytest

from tests.kube import webhook_certs as wc
from webhook.cli import ensure_certs
from webhook.core.pki import certificates
from webhook.devcluster.standin.apiserver import ApiServer

# The extender's Secret: a serving and a client pair.
EXTENDER_SECRET = "gs-gpushare-extender-tls"
EXTENDER_DNS = "gs-gpushare-extender.gpu-system.svc"
CLIENT = "gpushare-scheduler"


@pytest.fixture
def cluster(apiserver: ApiServer) -> ApiServer:
    return wc.with_configurations(apiserver)


def test_api_errors_are_clear_and_exit_1(cluster: ApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    cluster.fail_next("get", "secrets", status=500, count=10)
    code = ensure_certs.main(_argv(cluster))
    assert code == 1
    err = capsys.readouterr().err
    assert "gpushare ensure-certs: HTTP 500" in err


def test_unreachable_api_server_exits_1_with_one_line_and_no_retry_warnings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [*_argv(None), "--server", "http://127.0.0.1:9"]
    assert ensure_certs.main(argv) == 1
    captured = capsys.readouterr()
    assert captured.err == (
        "gpushare ensure-certs: cannot reach the API server at http://127.0.0.1:9: connection refused\n"
    )
    assert "Retrying" not in captured.out


def test_cli_run_prints_a_json_summary(cluster: ApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert ensure_certs.main(_argv(cluster)) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["action"] == "created"
    assert summary["secret"] == f"{wc.NS}/{wc.SECRET}"
    wc.assert_paired(cluster)


@pytest.mark.parametrize(
    "argv",
    [
        ["--secret", wc.SECRET, "--service-dns", wc.DNS[0]],  # no namespace, no POD_NAMESPACE
        ["--namespace", wc.NS, "--service-dns", wc.DNS[0]],  # no secret
        ["--namespace", wc.NS, "--secret", wc.SECRET],  # no DNS name
        ["--namespace", wc.NS, "--secret", wc.SECRET, "--service-dns", wc.DNS[0], "--valid-days", "0"],
        ["--namespace", wc.NS, "--secret", wc.SECRET, "--service-dns", wc.DNS[0], "--valid-days", "x"],
        [
            "--namespace",
            wc.NS,
            "--secret",
            wc.SECRET,
            "--service-dns",
            wc.DNS[0],
            "--renew-before-days",
            "400",
        ],
    ],
    ids=["no-namespace", "no-secret", "no-dns", "zero-days", "not-a-number", "renew-before-lifetime"],
)
def test_bad_arguments_exit_2(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    with pytest.raises(SystemExit) as exit_:
        raise SystemExit(ensure_certs.main(argv))
    assert exit_.value.code == 2
    assert "ensure-certs" in capsys.readouterr().err


def _argv(server: ApiServer | None) -> list[str]:
    argv = ["--namespace", wc.NS, "--secret", wc.SECRET, "--log-format", "text"]
    argv += [f"--service-dns={name}" for name in wc.DNS]
    argv += [
        "--mutating-webhook-configuration",
        wc.MUTATING,
        "--validating-webhook-configuration",
        wc.VALIDATING,
    ]
    return [*argv, "--server", server.url] if server else argv


def test_the_cli_takes_the_client_name(apiserver: ApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*_extender_argv(CLIENT), "--log-format", "text", "--server", apiserver.url]
    assert ensure_certs.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["action"] == "created"
    assert certificates.common_name(_extender_secret(apiserver)["client.crt"]) == CLIENT


@pytest.mark.parametrize("name", ["", "x" * 65], ids=["empty", "too-long"])
def test_a_client_name_that_cannot_be_a_common_name_exits_2(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        ensure_certs.main(_extender_argv(name))
    assert exit_.value.code == 2
    assert "a common name has 1 to 64 characters" in capsys.readouterr().err


def _extender_argv(client_name: str) -> list[str]:
    """The extender's Secret: serving and client pairs, the client certificate for `client_name`."""
    argv = ["--namespace", wc.NS, "--secret", EXTENDER_SECRET, "--service-dns", EXTENDER_DNS]
    return [*argv, "--client-name", client_name]


def _extender_secret(server: ApiServer) -> dict[str, bytes]:
    stored = server.get("secrets", EXTENDER_SECRET, wc.NS)
    assert stored is not None
    return {k: base64.b64decode(v) for k, v in stored["data"].items()}
