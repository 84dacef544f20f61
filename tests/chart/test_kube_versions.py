"""The Kubernetes versions the chart accepts, as Helm 3 and Helm 4 check them (`helm template
--kube-version`): Chart.yaml's floor, 1.30 (matchConditions and ValidatingAdmissionPolicy GA, the node name
in bound ServiceAccount tokens on by default), refused below with Helm's own message naming both versions;
a provider's pre-release suffix (1.30.5-gke.1000) passes, the floor being 1.30.0-0. The DRA part's floor,
1.36, is tests/chart/test_dra.py's."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.chart.render import CHART, NAMESPACE, RELEASE
from webhook.devcluster import helm

pytestmark = pytest.mark.parametrize("major", [3, 4], ids=["helm3", "helm4"])


def _template(major: int, version: str) -> subprocess.CompletedProcess[str]:
    binary = helm.binary(major)
    if binary is None:
        pytest.skip(f"{helm.NAMES[major]} missing: bash scripts/install-helm")
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", version]
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("version", ["1.28.15", "1.29.14"])
def test_a_cluster_below_1_30_is_refused_naming_the_floor(major: int, version: str) -> None:
    result = _template(major, version)
    assert result.returncode != 0
    assert "requires kubeVersion: >=1.30.0-0" in result.stderr
    assert f"v{version}" in result.stderr


@pytest.mark.parametrize("version", ["1.30.0", "1.30.5-gke.1000", "1.36.3", "1.37.2"])
def test_the_supported_versions_render(major: int, version: str) -> None:
    result = _template(major, version)
    assert result.returncode == 0, result.stderr
    kinds = {doc["kind"] for doc in yaml.safe_load_all(result.stdout) if doc}
    assert {"MutatingWebhookConfiguration", "ValidatingAdmissionPolicy", "DaemonSet"} <= kinds
