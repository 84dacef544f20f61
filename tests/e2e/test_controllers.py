"""kube-controller-manager's controllers meet our parts: a fresh namespace gets its `default`
ServiceAccount and root CA from them (no one else writes either), a Deployment asking for gpu-mem gets
pods that our webhook admits and kube-scheduler places through our extender (and that the garbage
collector removes with it), and a ResourceClaimTemplate a pod names yields a ResourceClaim owned by the pod.
"""

from __future__ import annotations

from typing import Any

from tests.e2e import objects, placement
from tests.e2e.bed import SCHEDULER_NAME, Bed
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.kube import errors, rest

GROUP = "controllers"
NODE = "ctl-node-0"
DRA = {"group": "resource.k8s.io", "version": "v1"}


def test_a_fresh_namespace_gets_its_default_service_account_and_root_ca_and_its_pods_are_admitted(
    bed: Bed,
) -> None:
    ns = "e2e-fresh"
    # Only the Namespace: the ServiceAccount and the ConfigMap below are the controllers' alone.
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    bed.request("POST", rest.path("namespaces"), body=body)
    bed.wait_for_object(rest.path("serviceaccounts", "default", ns))
    root_ca = bed.wait_for_object(rest.path("configmaps", "kube-root-ca.crt", ns))
    assert bed.cp.pki is not None
    assert root_ca["data"]["ca.crt"] == bed.cp.pki.ca_crt.read_text()
    assert {f["manager"] for f in root_ca["metadata"]["managedFields"]} == {"kube-controller-manager"}
    plain = bed.request("POST", rest.path("pods", namespace=ns), body=objects.pod("plain"))
    assert plain["spec"]["serviceAccountName"] == "default"
    gpu = bed.request("POST", rest.path("pods", namespace=ns), body=objects.gpu_pod("gpu", 2))
    # Through our mutating webhook: mode (b) sends gpu-mem pods to the chart's scheduler.
    assert gpu["spec"]["schedulerName"] == SCHEDULER_NAME


def _gpu_deployment(name: str, replicas: int, gib: int) -> dict[str, Any]:
    body = objects.deployment(name, objects.container(limits={resources.GPU_MEMORY: str(gib)}))
    body["spec"]["replicas"] = replicas
    template = body["spec"]["template"]
    template["spec"]["terminationGracePeriodSeconds"] = 0  # no kubelet confirms a graceful delete
    objects.in_group(template, GROUP)
    return body


def test_a_gpu_deployment_gets_pods_the_webhook_admits_and_the_extender_places_and_gc_removes(
    bed: Bed,
) -> None:
    # The webhook's nodeSelector (isolation off by default) picks nodes labelled so.
    bed.node(NODE, 2, 16, labels={resources.ISOLATION_KEY: "false"}, group=GROUP)
    ns = bed.namespace("e2e-controllers")
    deployments = rest.path("deployments", namespace=ns, group="apps")
    bed.request("POST", deployments, body=_gpu_deployment("trainer", 3, 6))

    def placed() -> list[Any] | None:
        pods = bed.pods(ns)
        done = len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods)
        return pods if done else None

    pods: list[Any] = bed.wait("3 pods of the Deployment bound", placed, timeout=60)
    for pod in pods:
        (owner,) = pod["metadata"]["ownerReferences"]
        assert owner["kind"] == "ReplicaSet" and owner["name"].startswith("trainer-")
        assert pod["spec"]["schedulerName"] == SCHEDULER_NAME  # our webhook's mutation
        decoded = ann.decode(pod["metadata"]["annotations"])
        assert decoded is not None and decoded.pod_total == 6  # our extender's placement
    used = placement.check_invariant(pods, {NODE: 16})
    assert sorted(used.values()) == [6, 12]  # 6 + 6 on one GPU, 6 on the other

    # Deleting the Deployment leaves its ReplicaSet and pods to the garbage collector.
    bed.request("DELETE", rest.path("deployments", "trainer", ns, group="apps"))
    bed.wait("the garbage collector to delete the pods", lambda: not bed.pods(ns))


def test_a_resource_claim_template_yields_a_claim_owned_by_the_pod_and_collected_with_it(bed: Bed) -> None:
    ns = bed.namespace("e2e-claims")
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu"},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}
            }
        },
    }
    bed.request("POST", rest.path("resourceclaimtemplates", namespace=ns, **DRA), body=template)
    body = objects.pod("claimer", objects.container())
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    body["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    pod = bed.request("POST", rest.path("pods", namespace=ns), body=body)

    def claim_name() -> str | None:
        stored = bed.request("GET", rest.path("pods", "claimer", ns))
        statuses = stored.get("status", {}).get("resourceClaimStatuses") or []
        return next((s.get("resourceClaimName") for s in statuses if s["name"] == "gpu"), None)

    name: str = bed.wait("the resourceclaim controller to name the pod's claim", claim_name)
    claim = bed.request("GET", rest.path("resourceclaims", name, ns, **DRA))
    assert claim["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "claimer",
            "uid": pod["metadata"]["uid"],
            "controller": True,
        }
    ]
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["name"] == "gpu" and request["exactly"]["deviceClassName"] == "gpu.example.com"
    assert "allocation" not in claim.get("status", {})  # no driver here: made, never allocated

    bed.request("DELETE", rest.path("pods", "claimer", ns), query={"gracePeriodSeconds": 0})

    def claim_gone() -> bool:
        try:
            bed.request("GET", rest.path("resourceclaims", name, ns, **DRA))
        except errors.NotFoundError:
            return True
        return False

    bed.wait("the garbage collector to delete the claim", claim_gone)
