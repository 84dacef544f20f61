"""End to end over HTTPS: the real uvicorn server on loopback, AdmissionReview v1 JSON in, patches applied."""

from __future__ import annotations

import base64
import json
import logging
import ssl
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import pytest

from tests.admission import samples
from tests.admission.conftest import Webhook, start_webhook
from tests.serving import scraped
from webhook.admission import app, settings
from webhook.core.admission import verdict
from webhook.serving import tls

GPU_MEM = {"aliyun.com/gpu-mem": "4"}
HALF_GPU = {"nvidia.com/gpu": "0.5"}


def post(webhook: Webhook, path: str, body: object) -> httpx.Response:
    return webhook.client.post(path, json=body)


def gpu_pod(limits: dict[str, str] | None = None) -> dict[str, Any]:
    return samples.pod(samples.pod_spec(samples.container(limits=GPU_MEM if limits is None else limits)))


def test_mutate_returns_a_patch_that_applies_and_is_idempotent(webhook):
    obj = gpu_pod()
    body = samples.review(obj, uid="e2e-1")
    response = post(webhook, "/mutate?timeout=10s", body)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    review = response.json()
    assert (review["apiVersion"], review["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert review["response"]["uid"] == "e2e-1"
    assert review["response"]["patchType"] == "JSONPatch"
    patched = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(review["response"]["patch"])))
    assert patched["spec"]["nodeSelector"] == {"cgpu.disable.isolation": "false"}
    assert {k: v for k, v in patched.items() if k != "spec"} == {k: v for k, v in obj.items() if k != "spec"}

    again = post(webhook, "/mutate?timeout=10s", samples.review(patched, uid="e2e-2")).json()
    assert again["response"] == {"uid": "e2e-2", "allowed": True}


def test_mutate_denies_a_fractional_gpu_with_the_core_message(webhook):
    obj = gpu_pod(HALF_GPU)
    review = post(webhook, "/mutate", samples.review(obj)).json()["response"]
    assert review["allowed"] is False
    assert review["status"]["code"] == 403
    assert review["status"]["reason"] == "Forbidden"
    assert review["status"]["message"] == verdict.evaluate(obj, verdict.Policy()).message()
    assert "patch" not in review


@pytest.mark.parametrize("kind", list(samples.WORKLOADS))
def test_validate_each_workload_kind_over_https(webhook, kind):
    good = samples.workload(kind, samples.pod_spec(samples.container(limits=GPU_MEM)))
    bad = samples.workload(kind, samples.pod_spec(samples.container(limits=HALF_GPU)))
    for operation in ("CREATE", "UPDATE"):
        ok = post(webhook, "/validate?timeout=5s", samples.review(good, operation=operation, old=good)).json()
        assert ok["response"]["allowed"] is True
        assert "patch" not in ok["response"] and "patchType" not in ok["response"]
        denied = post(webhook, "/validate", samples.review(bad, operation=operation, old=good)).json()
        assert denied["response"]["allowed"] is False
        assert denied["response"]["status"]["code"] == 403
        assert samples.WORKLOADS[kind][4] in denied["response"]["status"]["message"]
    mutated = post(webhook, "/mutate", samples.review(good)).json()["response"]
    assert set(mutated) == {"uid", "allowed"}


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_allowed_untouched(webhook, operation):
    old = gpu_pod(HALF_GPU)
    body = samples.review(None, operation=operation, kind="Pod", old=old if operation == "DELETE" else None)
    review = post(webhook, "/validate", body).json()["response"]
    assert review == {"uid": body["request"]["uid"], "allowed": True}


BIG = b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "pad": "' + b"x" * (3 * 1024 * 1024)


@pytest.mark.parametrize(
    ("method", "path", "content", "headers", "status", "error"),
    [
        ("POST", "/validate", b"{not json", {"content-type": "application/json"}, 400, "not valid JSON"),
        ("POST", "/validate", b"\xff\xfe", {"content-type": "application/json"}, 400, "not valid JSON"),
        ("POST", "/validate", b"[" * 100_000, {"content-type": "application/json"}, 400, "not valid JSON"),
        ("POST", "/mutate", b"", {"content-type": "application/json"}, 400, "not valid JSON"),
        (
            "POST",
            "/mutate",
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}',
            {"content-type": "application/json"},
            400,
            "request must be an object",
        ),
        (
            "POST",
            "/validate",
            b'{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}',
            {"content-type": "application/json"},
            400,
            "expected apiVersion",
        ),
        ("POST", "/validate", b"{}", {"content-type": "text/plain"}, 415, "application/json"),
        ("POST", "/validate", b"{}", {}, 415, "application/json"),
        ("GET", "/validate", b"", {}, 405, "Method Not Allowed"),
        ("PUT", "/mutate", b"{}", {"content-type": "application/json"}, 405, "Method Not Allowed"),
        ("POST", "/validate", BIG, {"content-type": "application/json"}, 413, "exceeds 3145728 bytes"),
        ("POST", "/nowhere", b"{}", {"content-type": "application/json"}, 404, "Not Found"),
    ],
    ids=[
        "not-json",
        "not-utf8",
        "too-deep",
        "empty",
        "missing-request",
        "wrong-api-version",
        "text-plain",
        "no-content-type",
        "get",
        "put",
        "over-3MiB",
        "unknown-path",
    ],
)
def test_bad_input_gets_a_json_error_and_the_server_keeps_serving(  # noqa: PLR0917 (pytest parameters)
    webhook, method, path, content, headers, status, error
):
    response = webhook.client.request(method, path, content=content, headers=headers)
    assert response.status_code == status
    assert error in response.json()["error"]
    if status == 405:
        assert response.headers["allow"] == "POST"
    assert post(webhook, "/validate", samples.review(gpu_pod())).json()["response"]["allowed"] is True


def test_a_chunked_body_over_the_limit_is_refused_without_content_length(webhook):
    def chunks():
        for _ in range(4):
            yield b"x" * (1024 * 1024)

    response = webhook.client.post(
        "/validate", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413


def test_probes_and_metrics_count_reviews_by_endpoint_and_verdict(fresh_webhook):
    webhook = fresh_webhook
    assert webhook.client.get("/healthz").json() == {"status": "ok"}
    assert webhook.client.get("/readyz").json() == {"status": "ready"}
    post(webhook, "/mutate", samples.review(gpu_pod()))
    post(webhook, "/validate", samples.review(gpu_pod(HALF_GPU)))
    webhook.client.post("/validate", content=b"nope", headers={"content-type": "application/json"})
    text = webhook.client.get("/metrics").text
    assert 'gpushare_webhook_requests_total{endpoint="mutate",verdict="patched"} 1.0' in text
    assert 'gpushare_webhook_requests_total{endpoint="validate",verdict="denied"} 1.0' in text
    assert 'gpushare_webhook_requests_total{endpoint="validate",verdict="bad_request"} 1.0' in text
    assert 'gpushare_webhook_request_duration_seconds_count{endpoint="validate"} 2.0' in text
    assert "gpushare_webhook_connections_opened_total 1.0" in text  # the client kept its one connection


def test_metrics_name_the_release_and_the_python_that_serve_them(webhook):
    assert scraped.build_info(webhook.client.get("/metrics").text) == scraped.THIS_BUILD


def test_one_log_line_per_review_with_identifiers_and_never_the_object(webhook, caplog):
    caplog.set_level(logging.INFO, logger="webhook.admission")
    obj = gpu_pod()
    obj["metadata"]["annotations"] = {"secret-ish": "do-not-log-me"}
    post(webhook, "/mutate", samples.review(obj, uid="log-1"))
    records = [r for r in caplog.records if r.name == "webhook.admission"]
    assert len(records) == 1
    fields = records[0].fields
    assert fields["uid"] == "log-1"
    assert (fields["kind"], fields["namespace"], fields["name"]) == ("Pod", "ml", "train-0")
    assert (fields["operation"], fields["verdict"], fields["endpoint"]) == ("CREATE", "patched", "mutate")
    assert fields["duration_ms"] >= 0
    assert "do-not-log-me" not in json.dumps(fields) and "do-not-log-me" not in records[0].getMessage()


def test_a_small_body_limit_from_settings_is_enforced(tmp_path):
    srv, cert_dir = start_webhook(tmp_path, max_body_bytes=2048)
    try:
        with httpx.Client(
            verify=ssl.create_default_context(cafile=str(cert_dir.ca_cert)), timeout=10
        ) as client:
            body = samples.review(gpu_pod())
            body["request"]["object"]["metadata"]["annotations"] = {"pad": "x" * 4096}
            assert client.post(srv.url + "/validate", json=body).status_code == 413
            assert client.post(srv.url + "/validate", json=samples.review(gpu_pod())).status_code == 200
    finally:
        srv.stop()


def test_excluded_namespaces_and_scheduler_name_from_settings(tmp_path):
    srv, cert_dir = start_webhook(
        tmp_path,
        excluded_namespaces=frozenset({"kube-system"}),
        policy=verdict.Policy(scheduler_name="gpushare-scheduler"),
    )
    try:
        with httpx.Client(
            verify=ssl.create_default_context(cafile=str(cert_dir.ca_cert)), timeout=10
        ) as client:
            skipped = client.post(
                srv.url + "/mutate", json=samples.review(gpu_pod(HALF_GPU), namespace="kube-system")
            )
            assert skipped.json()["response"]["allowed"] is True
            obj = gpu_pod()
            patch = client.post(srv.url + "/mutate", json=samples.review(obj)).json()["response"]["patch"]
            patched = jsonpatch.apply_patch(obj, json.loads(base64.b64decode(patch)))
            assert patched["spec"]["schedulerName"] == "gpushare-scheduler"
    finally:
        srv.stop()


def test_an_existing_certificate_is_kept_and_a_missing_dns_name_is_only_warned_about(tmp_path, caplog):
    cert_dir = tls.write_cert_dir(tmp_path / "certs", datetime.now(UTC))
    before = cert_dir.serving.cert.read_bytes()
    cfg = settings.build(overrides={"cert_dir": cert_dir.path, "service_dns": ("x.ns.svc",)})
    caplog.set_level(logging.WARNING, logger="webhook.admission")
    assert app.prepare_certs(cfg, datetime.now(UTC)) == cert_dir.serving
    assert cert_dir.serving.cert.read_bytes() == before
    assert any("lacks some DNS names" in r.getMessage() for r in caplog.records)


def test_generated_certificates_are_logged_with_their_absolute_folder(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    cfg = settings.build(overrides={"cert_dir": Path("certs")})
    caplog.set_level(logging.INFO, logger="webhook.admission")
    files = app.prepare_certs(cfg, datetime.now(UTC))
    assert files.exist()
    [record] = [r for r in caplog.records if "generated a development CA" in r.getMessage()]
    assert record.fields == {"dir": str(tmp_path / "certs")}


def test_idle_connections_are_kept_longer_than_the_api_server_keeps_them(tmp_path):
    # kube-apiserver's webhook client drops an idle connection after 90 s (client-go's transport,
    # http.DefaultTransport's IdleConnTimeout); a server closing first makes it race requests onto
    # closing connections and pay new TLS handshakes.
    cfg = settings.build(overrides={"host": "127.0.0.1", "port": 0})
    options = app.serve_options(cfg, tls.TlsFiles.in_dir(tmp_path))
    assert options.keep_alive_s > 90
    assert (options.host, options.port, options.tls) == ("127.0.0.1", 0, tls.TlsFiles.in_dir(tmp_path))
