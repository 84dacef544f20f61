"""The caBundle the API server gets verifies the certificate the webhook serves, in each certificate mode."""

from __future__ import annotations

import base64
import importlib
import json
import ssl
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.chart import render
from webhook.cli import ensure_certs
from webhook.core.pki import certificates
from webhook.devcluster.standin.apiserver import ApiServer

pytestmark = pytest.mark.skipif(
    render.helm_binary() is None, reason="helm missing: bash scripts/install-helm"
)

SERVICE_DNS = f"{render.RELEASE}-gpushare-webhook.{render.NAMESPACE}.svc"  # the name the API server dials


def _assert_bundle_verifies(bundle_b64: str, tls_crt: bytes, tls_key: bytes) -> None:
    bundle = base64.b64decode(bundle_b64)
    assert certificates.is_signed_by(
        tls_crt, bundle.split(b"-----END CERTIFICATE-----")[0] + b"-----END CERTIFICATE-----\n"
    )
    assert SERVICE_DNS in certificates.dns_sans(tls_crt)
    assert certificates.key_matches(certificates.KeyPair(tls_crt, tls_key))
    # What the API server does: trust only caBundle, check the name it dials.
    context = ssl.create_default_context(cadata=bundle.decode())
    assert context.get_ca_certs()


def _configurations(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"].endswith("WebhookConfiguration")]


def test_provided_certificates_end_up_in_the_secret_and_every_ca_bundle() -> None:
    now = datetime.now(UTC)
    ca = certificates.generate_ca("test-ca", now)
    serving = certificates.generate_serving(ca, [SERVICE_DNS], [], now)
    values = {
        "certificates": {
            "mode": "provided",
            "provided": {
                "caCrt": ca.cert_pem.decode(),
                "tlsCrt": serving.cert_pem.decode(),
                "tlsKey": serving.key_pem.decode(),
            },
        },
        "extender": {"enabled": False},
    }
    objects = render.render(values)
    secret = render.find(objects, "Secret", "-webhook-tls")
    tls_crt = base64.b64decode(secret["data"]["tls.crt"])
    tls_key = base64.b64decode(secret["data"]["tls.key"])
    hooks = [h for c in _configurations(objects) for h in c["webhooks"]]
    assert len(hooks) == 7  # pods, workloads, cronjobs, podtemplates, claims, claim templates; mutate
    for hook in hooks:
        _assert_bundle_verifies(hook["clientConfig"]["caBundle"], tls_crt, tls_key)
    assert (
        render.find(objects, "Deployment", "-webhook")["spec"]["template"]["spec"]["volumes"][0]["secret"][
            "secretName"
        ]
        == secret["metadata"]["name"]
    )


def test_self_managed_hook_job_pairs_the_secret_and_the_rendered_configurations(apiserver: ApiServer) -> None:
    objects = render.render()
    for config in _configurations(objects):
        assert (
            "caBundle" not in config["webhooks"][0]["clientConfig"]
        )  # no cluster to look up: the Job sets it
        apiserver.put(config)
    job = render.find(objects, "Job", "-certgen")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade,post-rollback"
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "ensure-certs"
    module = importlib.import_module("webhook.cli.ensure_certs")
    assert module.main([*args[1:], "--server", apiserver.url, "--log-format=text"]) == 0
    deployment = render.find(objects, "Deployment", "-webhook")
    secret_name = deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"]
    secret = apiserver.get("secrets", secret_name, render.NAMESPACE)
    assert secret is not None
    tls_crt = base64.b64decode(secret["data"]["tls.crt"])
    tls_key = base64.b64decode(secret["data"]["tls.key"])
    for config in _configurations(objects):
        stored = apiserver.get(config["kind"].lower() + "s", config["metadata"]["name"])
        assert stored is not None
        assert len(stored["webhooks"]) == len(config["webhooks"])
        for hook in stored["webhooks"]:
            _assert_bundle_verifies(hook["clientConfig"]["caBundle"], tls_crt, tls_key)
    # The webhook serves every DNS name ensure-certs certified.
    webhook_args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {a.split("=", 1)[1] for a in webhook_args if a.startswith("--service-dns=")} == set(
        certificates.dns_sans(tls_crt)
    )
    assert ensure_certs.main([*args[1:], "--server", apiserver.url, "--log-format=text"]) == 0  # idempotent
    assert apiserver.get("secrets", secret_name, render.NAMESPACE) == secret


def test_cert_manager_mode_injects_the_serving_certificates_ca() -> None:
    objects = render.render({"certificates": {"mode": "certManager"}})
    certificate = render.find(objects, "Certificate", "-webhook")
    for config in _configurations(objects):
        inject = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert inject == f"{render.NAMESPACE}/{certificate['metadata']['name']}"
    assert SERVICE_DNS in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["secretName"].endswith("-webhook-tls")
    assert not any(o["kind"] == "Job" for o in objects)


def test_self_managed_certificates_render_no_ca_bundle_for_a_rollback_to_put_back() -> None:
    # The hooks patch caBundle and Helm never owns it: `helm rollback` re-applies a revision's manifest,
    # which would otherwise bring back the caBundle (or the lack of one) that revision rendered. A fresh
    # install (no configuration found: `lookup` is empty here) is marked so that its upgrades keep it so.
    for config in _configurations(render.render({"certificates": {"mode": "selfManaged"}})):
        annotations = config["metadata"]["annotations"]
        assert annotations == {"gpushare.aliyun.com/ca-bundle-by-hooks": "true"}, config["metadata"]["name"]
        for hook in config["webhooks"]:
            assert "caBundle" not in hook["clientConfig"], config["metadata"]["name"]


def test_a_release_installed_before_the_mark_keeps_its_ca_bundle_rendered_from_the_installed_one() -> None:
    # `lookup` needs a cluster; the template must read the installed configuration, and render it only
    # for configurations without the mark (0.1.0's: their last manifest holds a caBundle, and a manifest
    # without one would make Helm remove it).
    helpers = (render.CHART / "templates" / "_helpers.tpl").read_text()
    body = helpers.split('define "gpushare.webhook.caBundle"')[1].split("{{- end }}\n")[0]
    assert 'lookup "admissionregistration.k8s.io/v1"' in body
    assert '(not (include "gpushare.webhook.caBundleByHooks" .))' in body


def _certgen(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind} {name}: {len(matches)} rendered"
    return matches[0]


def test_renewal_cronjob_runs_the_hook_jobs_pod_as_a_standing_identity_with_the_same_rules() -> None:
    objects = render.render()
    hook_name = f"{render.RELEASE}-gpushare-certgen"
    renew_name = f"{hook_name}-renew"
    job_pod = render.find(objects, "Job", "-certgen")["spec"]["template"]["spec"]
    cron = _certgen(objects, "CronJob", renew_name)
    assert cron["spec"]["schedule"] == "17 3 * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    cron_pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert cron_pod["serviceAccountName"] == renew_name
    assert {**cron_pod, "serviceAccountName": None} == {**job_pod, "serviceAccountName": None}
    for kind in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
        hook = _certgen(objects, kind, hook_name)
        renew = _certgen(objects, kind, renew_name)
        assert "helm.sh/hook" in hook["metadata"].get("annotations", {})  # deleted once the hook succeeds
        assert "annotations" not in renew["metadata"]  # stays for the CronJob
        for key in ("rules", "subjects", "roleRef"):
            if key in hook:
                assert json.dumps(renew[key]).replace(renew_name, hook_name) == json.dumps(hook[key])


def test_empty_renew_schedule_renders_no_standing_certgen_objects() -> None:
    objects = render.render({"certificates": {"selfManaged": {"renewSchedule": ""}}})
    assert not [o for o in objects if o["metadata"]["name"].endswith("-certgen-renew")]
    assert render.find(objects, "Job", "-certgen")


def test_renewal_cronjob_renews_a_certificate_close_to_expiry(apiserver: ApiServer) -> None:
    objects = render.render()
    for config in _configurations(objects):
        apiserver.put(config)
    cron = _certgen(objects, "CronJob", f"{render.RELEASE}-gpushare-certgen-renew")
    args = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"][1:]
    assert ensure_certs.main([*args, "--server", apiserver.url, "--log-format=text"]) == 0
    secret_name = f"{render.RELEASE}-gpushare-webhook-tls"

    def secret_data(key: str) -> str:
        secret = apiserver.get("secrets", secret_name, render.NAMESPACE)
        assert secret is not None
        return str(secret["data"][key])

    first = secret_data("tls.crt")
    assert ensure_certs.main([*args, "--server", apiserver.url, "--log-format=text"]) == 0
    assert secret_data("tls.crt") == first  # still valid: kept
    # A later run that finds the 365-day certificate inside its renewal window (as one 335 days on would).
    renew_all = [a for a in args if not a.startswith(("--renew-before-days=", "--valid-days="))]
    renew_all += ["--valid-days=400", "--renew-before-days=366"]
    assert ensure_certs.main([*renew_all, "--server", apiserver.url, "--log-format=text"]) == 0
    renewed = secret_data("tls.crt")
    assert renewed != first
    for config in _configurations(objects):
        stored = apiserver.get(config["kind"].lower() + "s", config["metadata"]["name"])
        assert stored is not None
        for hook in stored["webhooks"]:
            key = base64.b64decode(secret_data("tls.key"))
            _assert_bundle_verifies(hook["clientConfig"]["caBundle"], base64.b64decode(renewed), key)


@pytest.mark.parametrize("schedule", ["daily", "17 3 * *", 5], ids=["word", "four-fields", "number"])
def test_a_malformed_renew_schedule_is_refused_by_the_schema(schedule: object) -> None:
    error = render.render_error({"certificates": {"selfManaged": {"renewSchedule": schedule}}})
    assert "renewSchedule" in error


def test_the_pre_hook_only_creates_missing_secrets_and_the_post_hook_renews_and_patches() -> None:
    # Helm applies the caBundle it rendered before the pre-upgrade hook ran: a renewal there would be
    # undone until the post-upgrade hook, so renewing happens only after (and in the CronJob).
    objects = render.render({"certificates": {"selfManaged": {"renewSchedule": "0 3 * * *"}}})
    jobs = {o["metadata"]["name"]: o for o in objects if o["kind"] in ("Job", "CronJob")}
    pre = jobs[f"{render.RELEASE}-gpushare-certgen-pre"]
    post = jobs[f"{render.RELEASE}-gpushare-certgen"]
    renew = jobs[f"{render.RELEASE}-gpushare-certgen-renew"]
    assert pre["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade,pre-rollback"

    def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
        spec = obj["spec"].get("jobTemplate", obj)["spec"]["template"]["spec"]
        return list(spec["containers"])

    assert post["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade,post-rollback"

    def create_only(container: dict[str, Any]) -> bool:
        return bool(ensure_certs.build_parser().parse_args(container["args"][1:]).create_only)

    # The extender's Secret is kept whole before the Deployments roll: no caBundle holds its CA.
    assert [(c["name"], create_only(c)) for c in containers(pre)] == [
        ("ensure-certs", True),
        ("ensure-extender-certs", False),
    ]
    assert not any(create_only(c) for c in [*containers(post), *containers(renew)])
