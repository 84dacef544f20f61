"""The extender is served over HTTPS and kube-scheduler authenticates with a client certificate, in every
certificates.mode: every file a flag or tlsConfig names is in the volume mounted there, and comes from a
Secret the mode creates."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.chart import render
from webhook.cli import ensure_certs
from webhook.cli.serve import extender as serve_extender

pytestmark = pytest.mark.skipif(
    render.helm_binary() is None, reason="helm missing: bash scripts/install-helm"
)

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
EXTENDER_PEMS = {"tlsCrt": PEM, "tlsKey": PEM, "clientCrt": PEM, "clientKey": PEM}
MODES: dict[str, dict[str, Any]] = {
    "selfManaged": {},
    "certManager": {"certificates": {"mode": "certManager"}},
    "provided": {
        "certificates": {
            "mode": "provided",
            "provided": {"caCrt": PEM, "tlsCrt": PEM, "tlsKey": PEM, "extender": EXTENDER_PEMS},
        }
    },
}
EXTENDER_SECRET = f"{render.RELEASE}-gpushare-extender-tls"


def _rendered(mode: str) -> list[dict[str, Any]]:
    return render.render({"scheduler": {"mode": "second"}, **MODES[mode]})


def _pod(objects: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    spec: dict[str, Any] = render.find(objects, "Deployment", suffix)["spec"]["template"]["spec"]
    return spec


def _files(pod: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Every file of the pod's secret and projected volumes: mounted path -> (Secret, key)."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    out = {}
    for mount in pod["containers"][0]["volumeMounts"]:
        volume = volumes[mount["name"]]
        sources = volume.get("projected", {}).get("sources", [])
        if "secret" in volume:
            sources = [{"secret": {"name": volume["secret"]["secretName"], **volume["secret"]}}]
        for source in sources:
            secret = source["secret"]
            for item in secret.get("items", []):
                out[f"{mount['mountPath']}/{item['path']}"] = (secret["name"], item["key"])
    return out


def _secrets_made(objects: list[dict[str, Any]], mode: str) -> dict[str, set[str]]:
    """Secret name -> the keys it will hold, as the mode creates it."""
    if mode == "certManager":
        return {
            o["spec"]["secretName"]: {"tls.crt", "tls.key", "ca.crt"}
            for o in objects
            if o["kind"] == "Certificate"
        }
    if mode == "provided":
        return {o["metadata"]["name"]: set(o["data"]) for o in objects if o["kind"] == "Secret"}
    job = render.find(objects, "Job", "-certgen")["spec"]["template"]["spec"]
    (container,) = [c for c in job["containers"] if c["name"] == "ensure-extender-certs"]
    args = ensure_certs.build_parser().parse_args(container["args"][1:])
    assert args.client_name == "gpushare-scheduler"
    return {args.secret: {"tls.crt", "tls.key", "ca.crt", "ca.key", "client.crt", "client.key"}}


@pytest.mark.parametrize("mode", list(MODES))
def test_the_extender_serves_https_and_checks_clients_with_files_of_its_mounted_secret(mode: str) -> None:
    objects = _rendered(mode)
    pod = _pod(objects, "-extender")
    container = pod["containers"][0]
    settings = serve_extender.settings_from(serve_extender.build_parser().parse_args(container["args"][1:]))
    files = _files(pod)
    made = _secrets_made(objects, mode)
    named = [settings.tls_cert, settings.tls_key, settings.client_ca, settings.forward_ca]
    named += [settings.forward_cert, settings.forward_key]
    for path in named:
        assert path is not None
        secret, key = files[str(path)]
        assert key in made[secret], f"{path}: {secret} has no {key} in mode {mode}"
    assert settings.advertise_url.startswith("https://")
    assert settings.forward_server_name == f"{render.RELEASE}-gpushare-extender.{render.NAMESPACE}.svc"
    probes = [container[p]["httpGet"] for p in ("startupProbe", "livenessProbe", "readinessProbe")]
    if mode == "provided":
        # A CA you provide may sign others' client certificates: HTTP/1.1, and only kube-scheduler's name.
        assert not settings.http2
        assert settings.client_names == ("gpushare-scheduler",)
        assert all(p["scheme"] == "HTTPS" and p["port"] == "https" for p in probes)
    else:
        # The chart's own CA signs only kube-scheduler's client certificate: HTTP/2, the CA is the check,
        # and the kubelet probes the plain port (its probes carry no client certificate).
        assert settings.http2 and settings.client_names == ()
        health = next(p for p in container["ports"] if p["name"] == "health")
        assert settings.health_port == health["containerPort"]
        assert all(p["scheme"] == "HTTP" and p["port"] == "health" for p in probes)


@pytest.mark.parametrize(
    ("mode", "http2", "served"),
    [
        ("selfManaged", "auto", True),
        ("certManager", "auto", True),
        ("provided", "auto", False),
        ("provided", True, True),
        ("selfManaged", False, False),
    ],
)
def test_http2_auto_is_on_only_where_the_charts_own_ca_issues_the_extenders_certificates(
    mode: str, http2: Any, served: bool
) -> None:
    objects = render.render({"scheduler": {"mode": "second"}, **MODES[mode], "extender": {"http2": http2}})
    args = _pod(objects, "-extender")["containers"][0]["args"]
    settings = serve_extender.settings_from(serve_extender.build_parser().parse_args(args[1:]))
    assert settings.http2 is served
    assert settings.client_names == (() if served else ("gpushare-scheduler",))


def test_http2_auto_is_off_with_an_issuer_of_yours() -> None:
    values = {
        "certificates": {
            "mode": "certManager",
            "certManager": {"issuerRef": {"name": "corp", "kind": "ClusterIssuer"}},
        }
    }
    args = _pod(render.render({"scheduler": {"mode": "second"}, **values}), "-extender")["containers"][0][
        "args"
    ]
    assert "--http2" not in args and "--client-name=gpushare-scheduler" in args


@pytest.mark.parametrize("mode", list(MODES))
def test_kube_scheduler_reads_its_client_certificate_from_its_mounted_secret(mode: str) -> None:
    objects = _rendered(mode)
    config = yaml.safe_load(render.find(objects, "ConfigMap", "-scheduler")["data"]["config.yaml"])
    (entry,) = config["extenders"]
    assert entry["enableHTTPS"] is True
    assert entry["urlPrefix"].startswith("https://")
    tls = entry["tlsConfig"]
    assert tls["serverName"] == f"{render.RELEASE}-gpushare-extender.{render.NAMESPACE}.svc"
    files = _files(_pod(objects, "-scheduler"))
    made = _secrets_made(objects, mode)
    for field in ("caFile", "certFile", "keyFile"):
        secret, key = files[tls[field]]
        assert key in made[secret]
    # The scheduler gets neither the extender's serving key nor the CA key: with cert-manager, only the
    # client Certificate's Secret (whose keys are named tls.*), elsewhere only the client pair's keys.
    if mode == "certManager":
        certs = {o["spec"]["secretName"]: o for o in objects if o["kind"] == "Certificate"}
        assert {certs[secret]["spec"]["usages"][0] for secret, _ in files.values()} == {"client auth"}
        assert {key for _, key in files.values()} == {"ca.crt", "tls.crt", "tls.key"}
    else:
        assert {key for _, key in files.values()} == {"ca.crt", "client.crt", "client.key"}
    assert all(key != "ca.key" for _, key in files.values())


def test_the_ca_key_is_mounted_nowhere() -> None:
    for mode in MODES:
        for obj in _rendered(mode):
            assert "ca.key" not in str(obj.get("spec", {}).get("template", "")), f"{mode}: {obj['kind']}"


def test_the_extender_certificates_come_from_one_issuer_with_the_right_usages() -> None:
    certs = [o for o in _rendered("certManager") if o["kind"] == "Certificate"]
    serving = next(c for c in certs if c["metadata"]["name"].endswith("-extender"))
    client = next(c for c in certs if c["metadata"]["name"].endswith("-extender-client"))
    assert serving["spec"]["issuerRef"] == client["spec"]["issuerRef"]
    assert "server auth" in serving["spec"]["usages"]
    assert f"{render.RELEASE}-gpushare-extender.{render.NAMESPACE}.svc" in serving["spec"]["dnsNames"]
    assert client["spec"]["usages"] == ["client auth", "digital signature"]
    assert client["spec"]["commonName"] == "gpushare-scheduler"


def test_mode_a_snippet_names_the_documented_folder() -> None:
    values = {"extender": {"tls": {"schedulerCertDir": "/etc/kubernetes/gpushare"}}}
    snippet = render.find(render.render(values), "ConfigMap", "-scheduler-extender")
    (entry,) = yaml.safe_load(snippet["data"]["kube-scheduler-config.yaml"])["extenders"]
    assert entry["enableHTTPS"] is True
    assert entry["tlsConfig"]["certFile"] == "/etc/kubernetes/gpushare/client.crt"
    assert entry["tlsConfig"]["keyFile"] == "/etc/kubernetes/gpushare/client.key"
    assert entry["tlsConfig"]["caFile"] == "/etc/kubernetes/gpushare/ca.crt"


def test_self_managed_renewal_also_keeps_the_extender_secret() -> None:
    cron = render.find(render.render(), "CronJob", "-certgen-renew")
    containers = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["ensure-certs", "ensure-extender-certs"]
    only_extender = render.render({"webhook": {"enabled": False}})
    job = render.find(only_extender, "Job", "-certgen")["spec"]["template"]["spec"]
    assert [c["name"] for c in job["containers"]] == ["ensure-extender-certs"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"extender": {"urlPrefix": "http://10.0.0.1:39999/gpushare-scheduler"}},
            "/extender/urlPrefix",
        ),
        (
            {"certificates": {"mode": "provided", "provided": {"caCrt": PEM, "tlsCrt": PEM, "tlsKey": PEM}}},
            "certificates.provided.extender.tlsCrt, tlsKey",
        ),
        ({"extender": {"tls": {"schedulerCertDir": "relative/dir"}}}, "schedulerCertDir"),
        ({"extender": {"tls": {"clientName": ""}}}, "clientName"),
    ],
    ids=["plain-http-url", "provided-without-extender-pems", "relative-dir", "empty-client-name"],
)
def test_values_that_would_leave_the_extender_open_or_broken_fail_clearly(
    values: dict[str, Any], message: str
) -> None:
    assert message in render.render_error(values)
