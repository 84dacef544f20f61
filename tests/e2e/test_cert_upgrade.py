"""`helm install`, `upgrade`, `rollback` and `uninstall` with self-managed certificates, hooks and all,
against the real API server, with Helm 3 and with Helm 4: an upgrade that renews the webhook's certificate
never leaves the API server trusting a CA the Secret no longer holds, a rollback ends trusting it, and
uninstall removes the webhook configurations.

The chart renders no caBundle (the hooks patch it; Helm never owns it), so neither an upgrade nor a
rollback can put back a bundle some revision rendered: the check runs when the post-upgrade and the
post-rollback Job appear, which is after Helm applied the release and waited for it, and before the hook
patches anything.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import certaging
from tests.e2e.hookrunner import HookRunner
from webhook.devcluster import helm, release
from webhook.devcluster.controlplane import ControlPlane
from webhook.kube import errors, rest

NAMESPACE = "gpushare-system"
RELEASE = "gs"
SECRET = f"{RELEASE}-gpushare-webhook-tls"
CONFIGURATIONS = [
    ("mutatingwebhookconfigurations", f"{RELEASE}-gpushare-mutating"),
    ("validatingwebhookconfigurations", f"{RELEASE}-gpushare-validating"),
]


def _secret_ca(api: Any) -> bytes:
    return certaging.secret_ca(api, SECRET, NAMESPACE)


def _untrusted(api: Any) -> list[str]:
    """The webhooks whose caBundle does not trust the CA of the Secret the webhook pods serve from."""
    return certaging.untrusting(api, _secret_ca(api), CONFIGURATIONS)


def _appliers(api: Any) -> set[tuple[str, str]]:
    """(manager, operation) of every managedFields entry of the mutating configuration."""
    config = rest.request(api, "GET", certaging.config_path(*CONFIGURATIONS[0]))
    return {(f["manager"], f["operation"]) for f in config["metadata"]["managedFields"]}


@pytest.fixture(params=[3, 4], ids=["helm3", "helm4"])
def helm_binary(request: pytest.FixtureRequest) -> Iterator[str]:
    binary = helm.binary(request.param)
    assert binary is not None, f"{helm.NAMES[request.param]} missing: bash scripts/install-helm"
    yield binary


def test_an_upgrade_that_renews_the_certificate_keeps_the_bundle_trusting_it(
    kube_bins: Path, tmp_path: Path, helm_binary: str
) -> None:
    binary = helm_binary
    cp = ControlPlane(kube_bins, tmp_path / "cp").start()
    api = release.admin_api(cp)
    seen: list[str] = []
    upgrading: list[bool] = []

    def before(job: dict[str, Any]) -> None:
        # On install the bundle is empty until the post-install hook: nothing was trusted before.
        if upgrading and job["metadata"]["annotations"].get("helm.sh/hook", "").startswith("post-"):
            seen.append(job["metadata"]["name"])
            untrusted = _untrusted(api)
            assert untrusted == [], f"after Helm applied the release: {untrusted} distrust the Secret's CA"

    hooks = HookRunner(api, cp.admin_kubeconfig, NAMESPACE, before=before)
    env = {**os.environ, "KUBECONFIG": str(cp.admin_kubeconfig)}

    def run(*argv: str) -> None:
        args = [binary, *argv, "--namespace", NAMESPACE, "--timeout", "120s"]
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180, check=False)
        assert done.returncode == 0, done.stderr
        assert hooks.errors == []

    try:
        hooks.start()
        run("install", RELEASE, str(helm.CHART), "--create-namespace")
        assert _untrusted(api) == []
        # Helm 4 installs by server-side apply (manager "helm", operation Apply), Helm 3 by create/patch.
        operation = "Apply" if binary == helm.binary(4) else "Update"
        assert ("helm", operation) in _appliers(api)
        first_ca = _secret_ca(api)
        # What most of a year without upgrades (renewSchedule "") leaves: a pair the pods still serve, due
        # for renewal (10 days left, renewBeforeDays 30), its CA in the caBundle.
        certaging.age(api, SECRET, NAMESPACE, CONFIGURATIONS)
        upgrading.append(True)
        run("upgrade", RELEASE, str(helm.CHART))
        upgrading.clear()
        assert _secret_ca(api) != first_ca, "the upgrade's hooks renewed nothing"
        assert _untrusted(api) == []
        assert seen == [f"{RELEASE}-gpushare-certgen"]  # the check ran, at the post-upgrade hook
        # A rollback to the first revision, rendered before any CA existed, leaves the bundle alone.
        upgrading.append(True)
        run("rollback", RELEASE, "1")
        upgrading.clear()
        assert seen == [f"{RELEASE}-gpushare-certgen"] * 2  # checked at the post-rollback hook too
        assert _untrusted(api) == []
        run("uninstall", RELEASE)
        for plural, name in CONFIGURATIONS:
            with pytest.raises(errors.NotFoundError):
                rest.request(api, "GET", certaging.config_path(plural, name))
    finally:
        hooks.stop()
        api.close()
        cp.stop()
