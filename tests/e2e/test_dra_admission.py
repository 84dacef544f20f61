"""The API server sends ResourceClaims and ResourceClaimTemplates of our DeviceClasses to the webhook the
chart registered: a bad memory request is denied with our message, a good one admitted, other classes are
never sent."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e import dra
from tests.e2e.bed import Bed
from webhook.kube import errors, rest

NS = "e2e-dra-admission"


@pytest.fixture(scope="module")
def ns(bed: Bed) -> str:
    return bed.namespace(NS)


def _template(name: str, exactly: dict[str, Any], version: str = "v1") -> dict[str, Any]:
    return {
        "apiVersion": f"{dra.GROUP}/{version}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def _share(memory: str, cls: str = dra.SHARE_CLASS) -> dict[str, Any]:
    return {"deviceClassName": cls, "capacity": {"requests": {"memory": memory}}}


def _post(bed: Bed, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    plural = body["kind"].lower() + "s"
    version = body["apiVersion"].rpartition("/")[2]
    created: dict[str, Any] = bed.request(
        "POST", rest.path(plural, namespace=ns, group=dra.GROUP, version=version), body=body
    )
    return created


def _denied(bed: Bed, ns: str, body: dict[str, Any]) -> str:
    with pytest.raises(errors.ApiError) as caught:
        _post(bed, ns, body)
    assert caught.value.status == 403
    plural = body["kind"].lower() + "s"
    with pytest.raises(errors.NotFoundError):
        bed.request("GET", rest.path(plural, body["metadata"]["name"], ns, group=dra.GROUP))
    return caught.value.message


def test_a_template_asking_a_count_of_gib_is_denied_with_our_message(bed: Bed, ns: str) -> None:
    message = _denied(bed, ns, _template("three", _share("3")))
    assert (
        'admission webhook "resourceclaimtemplates.validate.gpushare.aliyun.com" denied the request'
        in message
    )
    assert (
        "ResourceClaimTemplate has 1 problem with GPU resources:\n"
        'spec.spec.devices.requests[0].exactly.capacity.requests.memory: "3": is read as 3 bytes'
    ) in message
    assert message.endswith("fix: write 3Gi")


def test_a_good_template_is_admitted(bed: Bed, ns: str) -> None:
    created = _post(bed, ns, _template("four", _share("4Gi")))
    assert (
        created["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"]
        == "4Gi"
    )
    rounded = _post(bed, ns, _template("rounded", _share("2500Mi")))  # a warning, not a denial
    assert rounded["metadata"]["name"] == "rounded"


def test_a_claim_with_a_count_where_a_share_is_meant_is_denied(bed: Bed, ns: str) -> None:
    body = dra.claim("counted", None)
    body["spec"]["devices"]["requests"][0]["exactly"]["count"] = 3
    message = _denied(bed, ns, body)
    assert 'admission webhook "resourceclaims.validate.gpushare.aliyun.com" denied the request' in message
    assert "spec.devices.requests[0].exactly.count" in message
    assert "asks for 3 whole GPUs (no memory is asked), not 3 GiB of one" in message


def test_another_drivers_class_is_not_ours_to_judge(bed: Bed, ns: str) -> None:
    created = _post(bed, ns, _template("theirs", _share("3", cls="gpu.example.com")))
    assert created["metadata"]["name"] == "theirs"


def test_a_template_larger_than_any_gpu_is_denied(bed: Bed, ns: str) -> None:
    message = _denied(bed, ns, _template("huge", _share("100Gi")))
    assert "spec.spec.devices.requests[0].exactly.capacity.requests.memory" in message
    assert "is more than the largest GPU has (80Gi)" in message
