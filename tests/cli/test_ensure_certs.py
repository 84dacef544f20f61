"""`gpushare ensure-certs` against the API stand-in: create, keep, replace, patch caBundle, races."""

from __future__ import annotations

import base64
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from webhook.cli import ensure_certs
from webhook.core import certificates
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import certsync

NS = "gpu-system"
SECRET = "gpushare-webhook-tls"
DNS = ("gpushare-webhook.gpu-system.svc", "gpushare-webhook.gpu-system.svc.cluster.local")
MUTATING = "gpushare-mutating"
VALIDATING = "gpushare-validating"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _configuration(kind: str, name: str, hooks: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": hook,
                "clientConfig": {
                    "service": {"namespace": NS, "name": "gpushare-webhook", "path": "/validate"}
                },
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }
            for hook in hooks
        ],
    }


@pytest.fixture
def cluster(apiserver: ApiServer) -> ApiServer:
    apiserver.put(
        _configuration("MutatingWebhookConfiguration", MUTATING, ["pods.mutate.gpushare.aliyun.com"])
    )
    apiserver.put(
        _configuration(
            "ValidatingWebhookConfiguration",
            VALIDATING,
            ["pods.validate.gpushare.aliyun.com", "workloads.validate.gpushare.aliyun.com"],
        )
    )
    return apiserver


def _settings(**overrides: Any) -> certsync.EnsureSettings:
    values: dict[str, Any] = {
        "namespace": NS,
        "secret": SECRET,
        "service_dns": DNS,
        "mutating": (MUTATING,),
        "validating": (VALIDATING,),
    }
    values.update(overrides)
    return certsync.EnsureSettings(**values)


def _run(server: ApiServer, at: datetime = NOW, **overrides: Any) -> certsync.Outcome:
    return certsync.ensure(certsync.KubeCluster(server.api), _settings(**overrides), lambda: at)


def _secret(server: ApiServer) -> dict[str, bytes]:
    secret = server.get("secrets", SECRET, NS)
    assert secret is not None
    return {k: base64.b64decode(v) for k, v in secret["data"].items()}


def _bundles(server: ApiServer) -> list[bytes]:
    out = []
    for plural, name in (
        ("mutatingwebhookconfigurations", MUTATING),
        ("validatingwebhookconfigurations", VALIDATING),
    ):
        config = server.get(plural, name)
        assert config is not None
        out += [base64.b64decode(h["clientConfig"]["caBundle"]) for h in config["webhooks"]]
    return out


def _assert_paired(server: ApiServer) -> None:
    data = _secret(server)
    assert certificates.key_matches(certificates.KeyPair(data["tls.crt"], data["tls.key"]))
    assert set(DNS) <= set(certificates.dns_sans(data["tls.crt"]))
    bundles = _bundles(server)
    assert len(bundles) == 3
    for bundle in bundles:
        first_ca = bundle[: bundle.index(b"-----END CERTIFICATE-----") + 26]
        assert certificates.is_signed_by(data["tls.crt"], first_ca)


def test_missing_secret_is_created_and_every_webhook_gets_its_ca(cluster: ApiServer) -> None:
    outcome = _run(cluster)
    assert outcome.secret == "created"
    assert sorted(outcome.patched) == [
        f"mutatingwebhookconfigurations/{MUTATING}",
        f"validatingwebhookconfigurations/{VALIDATING}",
    ]
    secret = cluster.get("secrets", SECRET, NS)
    assert secret is not None and secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}  # the CA key is never stored
    _assert_paired(cluster)


def test_second_run_keeps_a_valid_pair_and_patches_nothing(cluster: ApiServer) -> None:
    _run(cluster)
    before = cluster.get("secrets", SECRET, NS)
    cluster.reset_counts()
    outcome = _run(cluster, at=NOW + timedelta(days=100))
    assert outcome.secret == "kept"
    assert outcome.patched == []
    assert len(outcome.unchanged) == 2
    assert cluster.get("secrets", SECRET, NS) == before
    assert cluster.requests[("patch", "validatingwebhookconfigurations")] == 0
    assert cluster.requests[("update", "secrets")] == 0


@pytest.mark.parametrize(
    ("change", "at"),
    [
        ({"service_dns": ("other.gpu-system.svc",)}, NOW),
        ({}, NOW + timedelta(days=340)),  # 365-day certificate, renewed 30 days before expiry
    ],
    ids=["other-dns-names", "close-to-expiry"],
)
def test_secret_for_other_names_or_close_to_expiry_is_replaced_and_old_ca_kept_in_bundle(
    cluster: ApiServer, change: dict[str, Any], at: datetime
) -> None:
    _run(cluster, **change)
    old_ca = _secret(cluster)["ca.crt"]
    outcome = _run(cluster, at=at)
    assert outcome.secret == "replaced"
    new = _secret(cluster)
    assert new["ca.crt"] != old_ca
    _assert_paired(cluster)
    # Pods still serve the old certificate until the kubelet refreshes their volume: keep trusting it.
    for bundle in _bundles(cluster):
        assert bundle.startswith(new["ca.crt"])
        assert old_ca in bundle


@pytest.mark.parametrize(
    "data",
    [
        {"tls.crt": "bm90IGEgY2VydA==", "tls.key": "bm9wZQ==", "ca.crt": "bm9wZQ=="},
        {"tls.crt": "%%% not base64 %%%"},
        {},
    ],
    ids=["garbage-pem", "bad-base64", "empty"],
)
def test_unusable_secret_is_replaced(cluster: ApiServer, data: dict[str, str]) -> None:
    cluster.put(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": NS}, "data": data}
    )
    assert _run(cluster).secret == "replaced"
    _assert_paired(cluster)


def test_serving_cert_from_another_ca_is_replaced(cluster: ApiServer) -> None:
    _run(cluster)
    foreign = certificates.generate_ca("someone-else", NOW)
    data = _secret(cluster)
    cluster.edit("secrets", SECRET, {"data": {"ca.crt": base64.b64encode(foreign.cert_pem).decode()}}, NS)
    assert data["ca.crt"] != foreign.cert_pem
    assert _run(cluster).secret == "replaced"
    _assert_paired(cluster)


def test_missing_configurations_are_reported_not_fatal(apiserver: ApiServer) -> None:
    outcome = _run(apiserver)  # the pre-install run: configurations do not exist yet
    assert outcome.secret == "created"
    assert sorted(outcome.missing) == [
        f"mutatingwebhookconfigurations/{MUTATING}",
        f"validatingwebhookconfigurations/{VALIDATING}",
    ]


def test_conflicts_on_create_and_patch_are_retried(cluster: ApiServer) -> None:
    cluster.fail_next("create", "secrets", status=409)
    cluster.fail_next("patch", "validatingwebhookconfigurations", status=409, count=2)
    outcome = _run(cluster)
    assert outcome.secret == "created"
    assert len(outcome.patched) == 2
    _assert_paired(cluster)


def test_a_patch_on_a_configuration_changed_meanwhile_is_rejected_and_redone(cluster: ApiServer) -> None:
    _run(cluster)
    # Someone resets one caBundle while another writer bumps the object: the rv-guarded patch must win.
    cluster.edit("validatingwebhookconfigurations", VALIDATING, {"metadata": {"labels": {"x": "1"}}})
    config = cluster.get("validatingwebhookconfigurations", VALIDATING)
    assert config is not None
    config["webhooks"][1]["clientConfig"].pop("caBundle")
    cluster.put(config)
    outcome = _run(cluster)
    assert outcome.patched == [f"validatingwebhookconfigurations/{VALIDATING}"]
    _assert_paired(cluster)


def test_concurrent_runs_end_with_one_paired_secret(cluster: ApiServer) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            certsync.ensure(certsync.KubeCluster(cluster.new_client()), _settings(), lambda: NOW)
        except BaseException as exc:  # collected and re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    _assert_paired(cluster)
    assert len(cluster.objects("secrets", NS)) == 1


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
    assert summary["secret"] == f"{NS}/{SECRET}"
    _assert_paired(cluster)


@pytest.mark.parametrize(
    "argv",
    [
        ["--secret", SECRET, "--service-dns", DNS[0]],  # no namespace, no POD_NAMESPACE
        ["--namespace", NS, "--service-dns", DNS[0]],  # no secret
        ["--namespace", NS, "--secret", SECRET],  # no DNS name
        ["--namespace", NS, "--secret", SECRET, "--service-dns", DNS[0], "--valid-days", "0"],
        ["--namespace", NS, "--secret", SECRET, "--service-dns", DNS[0], "--valid-days", "x"],
        ["--namespace", NS, "--secret", SECRET, "--service-dns", DNS[0], "--renew-before-days", "400"],
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
    argv = ["--namespace", NS, "--secret", SECRET, "--log-format", "text"]
    argv += [f"--service-dns={name}" for name in DNS]
    argv += ["--mutating-webhook-configuration", MUTATING, "--validating-webhook-configuration", VALIDATING]
    return [*argv, "--server", server.url] if server else argv
