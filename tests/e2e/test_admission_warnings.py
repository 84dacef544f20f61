"""Our warnings reach the client through the real kube-apiserver, as `kubectl apply` prints them: a share
too small to hold a CUDA context, with the chart's `webhook.minShareMiB` raised by `helm upgrade` (in GiB
no share is under the default 512 MiB) and the webhook restarted on the new ConfigMap."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.chart.render import CHART
from tests.e2e import objects
from tests.e2e.bed import NAMESPACE, RELEASE, Bed
from webhook.kube import rest

NS = "e2e-admission-warnings"
# RFC 7234 as kube-apiserver writes a webhook's warning: 299 - "text" (quotes and backslashes escaped).
_WARNING = re.compile(r'^299 - "((?:[^"\\]|\\.)*)"$')


def _upgrade(bed: Bed, *sets: str) -> None:
    values = bed.root / f"values-{RELEASE}.json"
    argv = ["upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--values", str(values)]
    bed.helm(*argv, *(arg for value in sets for arg in ("--set", value)))
    webhook = next(p for p in bed.processes if p.name == "webhook")
    webhook.stop()
    bed.processes.remove(webhook)
    bed.start_webhook()  # reads the release's ConfigMap, as a rolled-out pod would


@pytest.fixture(scope="module")
def ns(bed: Bed) -> Iterator[str]:
    namespace = bed.namespace(NS)
    _upgrade(bed, "webhook.minShareMiB=2048")
    try:
        yield namespace
    finally:
        _upgrade(bed)  # the values file's own: the default least share


def _create(bed: Bed, namespace: str, body: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """POST a pod; what was created and the warnings of kube-apiserver's answer, unescaped."""
    headers = {"Accept": rest.JSON, "Content-Type": rest.JSON}
    method, url, headers, data, _ = bed.api.param_serialize(
        method="POST",
        resource_path=rest.path("pods", namespace=namespace),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    raw = bed.api.call_api(method, url, header_params=headers, body=data, _request_timeout=30).response
    assert raw.status == 201, raw.data
    warnings = []
    for header in raw.headers.getlist("Warning"):
        found = _WARNING.match(header)
        assert found is not None, header
        warnings.append(re.sub(r"\\(.)", r"\1", found.group(1)))
    return json.loads(raw.data), warnings


def test_a_share_under_the_least_is_created_and_the_client_is_warned(bed: Bed, ns: str) -> None:
    created, warnings = _create(bed, ns, objects.gpu_pod("one-gib", 1))
    assert created["metadata"]["name"] == "one-gib"
    assert warnings == [
        'container "c0": 1024 MiB of GPU memory may not hold a CUDA context; ask at least 2 (2048 MiB)'
    ]
    created, warnings = _create(bed, ns, objects.gpu_pod("two-gib", 2))
    assert warnings == []
