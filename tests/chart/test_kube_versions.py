"""The Kubernetes versions the chart accepts, as Helm 3 and Helm 4 check them (`helm template
--kube-version`): Chart.yaml's floor, 1.30 (matchConditions and ValidatingAdmissionPolicy GA, the node name
in bound ServiceAccount tokens on by default), refused below with Helm's own message naming both versions;
a provider's pre-release suffix (1.30.5-gke.1000) passes, the floor being 1.30.0-0. The DRA part's floor,
1.36, is tests/chart/test_dra.py's. The second kube-scheduler's image (mode b) may not be newer than the
cluster (the version skew policy)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.chart.render import CHART, NAMESPACE, RELEASE
from webhook.devcluster import helm

pytestmark = pytest.mark.parametrize("major", [3, 4], ids=["helm3", "helm4"])


def _template(major: int, version: str, *extra: str) -> subprocess.CompletedProcess[str]:
    binary = helm.binary(major)
    if binary is None:
        pytest.skip(f"{helm.NAMES[major]} missing: bash scripts/install-helm")
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", version, *extra]
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


def _second_scheduler(major: int, version: str, tag: str) -> subprocess.CompletedProcess[str]:
    return _template(major, version, "--set", "scheduler.mode=second", "--set", f"scheduler.image.tag={tag}")


@pytest.mark.parametrize(
    ("version", "tag"), [("1.30.14", "v1.31.0"), ("1.33.0", "v1.34.1"), ("1.36.3", "1.37.2")]
)
def test_a_second_scheduler_newer_than_the_cluster_is_refused(major: int, version: str, tag: str) -> None:
    result = _second_scheduler(major, version, tag)
    assert result.returncode != 0
    assert f"scheduler.image.tag {tag} is newer than this cluster's Kubernetes v{version}" in result.stderr


@pytest.mark.parametrize(
    ("version", "tag"),
    [("1.30.14", "v1.30.14"), ("1.34.0", "v1.34.1"), ("1.37.2", "v1.34.1"), ("1.30.0", "v1.31.0-custom")],
)
def test_a_second_scheduler_as_new_as_the_cluster_or_older_or_unversioned_renders(
    major: int, version: str, tag: str
) -> None:
    """A tag that is not a plain release (a site's own build) is taken as given."""
    result = _second_scheduler(major, version, tag)
    assert result.returncode == 0, result.stderr
