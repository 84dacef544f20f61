"""`certsync.ensure` against the API stand-in: create, keep, replace, patch caBundle, conflicts, races."""

from __future__ import annotations

import base64
import threading
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.kube import webhook_certs as wc
from webhook.core.pki import certificates
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import certsync


@pytest.fixture
def cluster(apiserver: ApiServer) -> ApiServer:
    return wc.with_configurations(apiserver)


def test_missing_secret_is_created_and_every_webhook_gets_its_ca(cluster: ApiServer) -> None:
    outcome = wc.run(cluster)
    assert outcome.secret == "created"
    assert sorted(outcome.patched) == [
        f"mutatingwebhookconfigurations/{wc.MUTATING}",
        f"validatingwebhookconfigurations/{wc.VALIDATING}",
    ]
    secret = cluster.get("secrets", wc.SECRET, wc.NS)
    assert secret is not None and secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}  # the CA key is never stored
    wc.assert_paired(cluster)


def test_second_run_keeps_a_valid_pair_and_patches_nothing(cluster: ApiServer) -> None:
    wc.run(cluster)
    before = cluster.get("secrets", wc.SECRET, wc.NS)
    cluster.reset_counts()
    outcome = wc.run(cluster, at=wc.NOW + timedelta(days=100))
    assert outcome.secret == "kept"
    assert outcome.patched == []
    assert len(outcome.unchanged) == 2
    assert cluster.get("secrets", wc.SECRET, wc.NS) == before
    assert cluster.requests[("patch", "validatingwebhookconfigurations")] == 0
    assert cluster.requests[("update", "secrets")] == 0


@pytest.mark.parametrize(
    ("change", "at"),
    [
        ({"service_dns": ("other.gpu-system.svc",)}, wc.NOW),
        ({}, wc.NOW + timedelta(days=340)),  # 365-day certificate, renewed 30 days before expiry
    ],
    ids=["other-dns-names", "close-to-expiry"],
)
def test_secret_for_other_names_or_close_to_expiry_is_replaced_and_old_ca_kept_in_bundle(
    cluster: ApiServer, change: dict[str, Any], at: datetime
) -> None:
    wc.run(cluster, **change)
    old_ca = wc.secret(cluster)["ca.crt"]
    outcome = wc.run(cluster, at=at)
    assert outcome.secret == "replaced"
    new = wc.secret(cluster)
    assert new["ca.crt"] != old_ca
    wc.assert_paired(cluster)
    # Pods still serve the old certificate until the kubelet refreshes their volume: keep trusting it.
    for bundle in wc.bundles(cluster):
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
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": wc.SECRET, "namespace": wc.NS},
            "data": data,
        }
    )
    assert wc.run(cluster).secret == "replaced"
    wc.assert_paired(cluster)


def test_serving_cert_from_another_ca_is_replaced(cluster: ApiServer) -> None:
    wc.run(cluster)
    foreign = certificates.generate_ca("someone-else", wc.NOW)
    data = wc.secret(cluster)
    patch = {"data": {"ca.crt": base64.b64encode(foreign.cert_pem).decode()}}
    cluster.edit("secrets", wc.SECRET, patch, wc.NS)
    assert data["ca.crt"] != foreign.cert_pem
    assert wc.run(cluster).secret == "replaced"
    wc.assert_paired(cluster)


def test_missing_configurations_are_reported_not_fatal(apiserver: ApiServer) -> None:
    outcome = wc.run(apiserver)  # the pre-install run: configurations do not exist yet
    assert outcome.secret == "created"
    assert sorted(outcome.missing) == [
        f"mutatingwebhookconfigurations/{wc.MUTATING}",
        f"validatingwebhookconfigurations/{wc.VALIDATING}",
    ]


def test_conflicts_on_create_and_patch_are_retried(cluster: ApiServer) -> None:
    cluster.fail_next("create", "secrets", status=409)
    cluster.fail_next("patch", "validatingwebhookconfigurations", status=409, count=2)
    outcome = wc.run(cluster)
    assert outcome.secret == "created"
    assert len(outcome.patched) == 2
    wc.assert_paired(cluster)


def test_a_patch_on_a_configuration_changed_meanwhile_is_rejected_and_redone(cluster: ApiServer) -> None:
    wc.run(cluster)
    # Someone resets one caBundle while another writer bumps the object: the rv-guarded patch must win.
    cluster.edit("validatingwebhookconfigurations", wc.VALIDATING, {"metadata": {"labels": {"x": "1"}}})
    config = cluster.get("validatingwebhookconfigurations", wc.VALIDATING)
    assert config is not None
    config["webhooks"][1]["clientConfig"].pop("caBundle")
    cluster.put(config)
    outcome = wc.run(cluster)
    assert outcome.patched == [f"validatingwebhookconfigurations/{wc.VALIDATING}"]
    wc.assert_paired(cluster)


def test_concurrent_runs_end_with_one_paired_secret(cluster: ApiServer) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            certsync.ensure(certsync.KubeCluster(cluster.new_client()), wc.settings(), lambda: wc.NOW)
        except BaseException as exc:  # collected and re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors
    wc.assert_paired(cluster)
    assert len(cluster.objects("secrets", wc.NS)) == 1


def test_create_only_keeps_an_existing_secret_whatever_it_holds_and_patches_nothing(
    cluster: ApiServer,
) -> None:
    # Helm's pre-upgrade hook: a renewal here would be undone by the caBundle Helm rendered before it.
    wc.run(cluster)
    before = cluster.get("secrets", wc.SECRET, wc.NS)
    bundles = wc.bundles(cluster)
    cluster.reset_counts()
    late = wc.NOW + timedelta(days=340)  # close to expiry: a full run would replace it
    outcome = wc.run(cluster, at=late, create_only=True)
    assert (outcome.secret, outcome.patched, outcome.unchanged) == ("kept", [], [])
    assert cluster.get("secrets", wc.SECRET, wc.NS) == before
    assert wc.bundles(cluster) == bundles
    assert cluster.requests[("update", "secrets")] == 0
    assert wc.run(cluster, at=late).secret == "replaced"  # the post-upgrade run renews it


def test_create_only_creates_a_missing_secret_without_patching(cluster: ApiServer) -> None:
    outcome = wc.run(cluster, create_only=True)
    assert (outcome.secret, outcome.patched) == ("created", [])
    assert set(wc.secret(cluster)) == {"tls.crt", "tls.key", "ca.crt"}
    for plural, name in (
        ("mutatingwebhookconfigurations", wc.MUTATING),
        ("validatingwebhookconfigurations", wc.VALIDATING),
    ):
        config = cluster.get(plural, name)
        assert config is not None
        assert all("caBundle" not in hook["clientConfig"] for hook in config["webhooks"])


def test_create_only_replaces_a_pair_no_server_could_load(cluster: ApiServer) -> None:
    # Pods rolled by the upgrade could not start with it, and helm --wait would never reach the post hook.
    wc.run(cluster)
    cluster.edit("secrets", wc.SECRET, {"data": {"tls.crt": base64.b64encode(b"junk").decode()}}, wc.NS)
    outcome = wc.run(cluster, create_only=True)
    assert (outcome.secret, outcome.patched) == ("replaced", [])
    assert set(wc.secret(cluster)) == {"tls.crt", "tls.key", "ca.crt"}
    assert wc.run(cluster).patched  # the post-upgrade run puts the new CA into caBundle
