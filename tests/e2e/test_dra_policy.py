"""Least privilege of the DRA driver, enforced by the real API server: its RBAC and the chart's
ValidatingAdmissionPolicy let a driver whose token is bound to its pod on one node write only that node's
ResourceSlices of its own driver name, read claims and never change them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest

from tests.e2e import dra
from tests.e2e.bed import Bed
from webhook.core.node import draslice
from webhook.kube import client, errors, rest

NODE, OTHER = "dra-policy-a", "dra-policy-b"


@pytest.fixture(scope="module")
def driver_api(bed: Bed) -> Iterator[kubernetes.client.ApiClient]:
    """The API as the driver on node A sees it: the chart's ServiceAccount, its token bound to its pod."""
    dra.install(bed)
    for name in (NODE, OTHER):
        bed.node(name, 1, 16, group="dra-policy")
    api = client.connect(client.ClientSettings(kubeconfig=str(dra.driver_kubeconfig(bed, NODE))))
    try:
        bed.wait("the admission policy in force", lambda: _refused(bed, api), timeout=30)
        yield api
    finally:
        api.close()
        for name in (NODE, OTHER):
            with contextlib.suppress(errors.NotFoundError):
                bed.request("DELETE", rest.path("resourceslices", _name(name), group=dra.GROUP))
        dra.uninstall(bed)


def _refused(bed: Bed, api: kubernetes.client.ApiClient) -> bool:
    """Whether the API server enforces the policy yet (it loads a new one within seconds): a write to
    another node's slice is refused; one that got through is undone."""
    try:
        _post(api, _slice(OTHER))
    except errors.ForbiddenError:
        return True
    bed.request("DELETE", rest.path("resourceslices", _name(OTHER), group=dra.GROUP))
    return False


def _name(node: str, driver: str = dra.DRIVER) -> str:
    return draslice.slice_name(node, driver)


def _slice(node: str, driver: str = dra.DRIVER) -> dict[str, Any]:
    return draslice.resource_slice(node, driver, 1, [])


def _post(api: kubernetes.client.ApiClient, body: dict[str, Any]) -> Any:
    return rest.request(api, "POST", rest.path("resourceslices", group=dra.GROUP), body=body)


def test_the_driver_writes_its_own_nodes_slice(bed: Bed, driver_api: kubernetes.client.ApiClient) -> None:
    created = _post(driver_api, _slice(NODE))
    body = draslice.resource_slice(NODE, dra.DRIVER, 2, [])
    path = rest.path("resourceslices", _name(NODE), group=dra.GROUP)
    body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    assert rest.request(driver_api, "PUT", path, body=body)["spec"]["pool"]["generation"] == 2


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (_slice(OTHER), "the DRA driver of node dra-policy-a may write only ResourceSlices of its own node"),
        (_slice(NODE, "nic.example.com"), "may write only ResourceSlices of driver gpushare.aliyun.com"),
    ],
    ids=["another-node", "another-driver"],
)
def test_the_policy_refuses_another_nodes_or_drivers_slice(
    driver_api: kubernetes.client.ApiClient, body: dict[str, Any], needle: str
) -> None:
    with pytest.raises(errors.ForbiddenError) as caught:
        _post(driver_api, body)
    assert needle in caught.value.message


def test_the_driver_cannot_move_its_slice_nor_delete_another_nodes(
    bed: Bed, driver_api: kubernetes.client.ApiClient
) -> None:
    bed.request("POST", rest.path("resourceslices", group=dra.GROUP), body=_slice(OTHER))
    with pytest.raises(errors.ForbiddenError, match="may write only ResourceSlices of its own node"):
        rest.request(driver_api, "DELETE", rest.path("resourceslices", _name(OTHER), group=dra.GROUP))
    own = rest.request(driver_api, "GET", rest.path("resourceslices", _name(NODE), group=dra.GROUP))
    own["spec"]["nodeName"] = OTHER
    path = rest.path("resourceslices", _name(NODE), group=dra.GROUP)
    with pytest.raises(errors.ApiError) as caught:  # the API server's own validation may answer first
        rest.request(driver_api, "PUT", path, body=own)
    assert caught.value.status in (403, 422)


def test_a_token_not_bound_to_a_pod_writes_nothing(bed: Bed) -> None:
    token = bed.token(dra.DRIVER_SA, namespace=dra.NAMESPACE)
    path = bed.root / "kubeconfigs" / "dra-unbound.kubeconfig"
    api = client.connect(
        client.ClientSettings(kubeconfig=str(bed.cp.write_kubeconfig(path, {"token": token})))
    )
    try:
        with pytest.raises(errors.ForbiddenError, match="token bound to its pod on a node"):
            _post(api, _slice(NODE, dra.DRIVER) | {"metadata": {"name": "unbound"}})
    finally:
        api.close()


def test_rbac_lets_the_driver_read_claims_and_nothing_more(driver_api: kubernetes.client.ApiClient) -> None:
    with pytest.raises(errors.NotFoundError):
        rest.request(driver_api, "GET", rest.path("resourceclaims", "none", "default", group=dra.GROUP))
    for method, path, body in (
        ("GET", rest.path("resourceclaims", namespace="default", group=dra.GROUP), None),
        ("POST", rest.path("resourceclaims", namespace="default", group=dra.GROUP), dra.claim("x", "1Gi")),
        ("GET", rest.path("pods", namespace="default"), None),
    ):
        with pytest.raises(errors.ForbiddenError):
            rest.request(driver_api, method, path, body=body)
