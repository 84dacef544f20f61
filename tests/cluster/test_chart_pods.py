"""The chart installed with `helm install --wait`, every part a pod of our image on a node that runs
containers: each reaches Ready through its own probes, the certificate hook Job's work is in place, one
extender replica leads, and the API server and the chart's kube-scheduler reach our servers through
their Services (the denial as kubectl shows it; placements only the extender writes)."""

from __future__ import annotations

import base64
import json

from tests.cluster.workloads import Workloads, ready
from webhook.core.wire import resources
from webhook.devcluster.podrelease import FULLNAME, NAMESPACE, PodRelease
from webhook.kube import rest

GPU_MEM = resources.GPU_MEMORY


def every_part_ready(chart: PodRelease) -> None:
    """Each Deployment and DaemonSet of the release ready through its own probes (the node in mode share:
    the device plugin runs there, the DRA driver nowhere), each container up since its start."""
    assert ready(chart, "deployments", "webhook") == (2, 2)
    assert ready(chart, "deployments", "extender") == (2, 2)
    assert ready(chart, "deployments", "scheduler") == (1, 1)
    assert ready(chart, "daemonsets", "device-plugin") == (1, 1)
    assert ready(chart, "daemonsets", "dra-driver") == (0, 0)
    pods = chart.api.pods(NAMESPACE)
    for pod in pods:
        for status in pod["status"].get("containerStatuses") or []:
            assert status["ready"], (pod["metadata"]["name"], status)
            assert status["restartCount"] == 0, (pod["metadata"]["name"], status)
    images = {c["image"] for p in pods for c in p["spec"]["containers"]}
    assert images == {chart.cluster.names["gpushare"], chart.cluster.names["kube-scheduler"]}


def test_every_part_is_ready_through_its_own_probes(chart: PodRelease) -> None:
    every_part_ready(chart)


def test_the_certificate_hook_issued_what_the_servers_present(chart: PodRelease) -> None:
    """selfManaged: the hook Job (run as a pod, then deleted) wrote the Secret and patched its CA into
    both webhook configurations; the API server's calls through the Service trust it (later tests)."""
    secret = chart.api.request("GET", rest.path("secrets", f"{FULLNAME}-webhook-tls", NAMESPACE))
    ca = base64.b64decode(secret["data"]["ca.crt"])
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        listed = chart.api.request("GET", rest.path(plural, group="admissionregistration.k8s.io"))
        ours = [c for c in listed["items"] if c["metadata"]["name"].startswith(FULLNAME)]
        assert ours, plural
        for hook in ours[0]["webhooks"]:
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca, hook["name"]
            assert "service" in hook["clientConfig"], hook["clientConfig"]
    jobs = chart.api.request("GET", rest.path("jobs", namespace=NAMESPACE, group="batch"))["items"]
    assert not [j["metadata"]["name"] for j in jobs], "hook Jobs are deleted once they succeeded"


def test_one_extender_replica_leads(chart: PodRelease) -> None:
    lease = chart.api.request(
        "GET", rest.path("leases", "gpushare-extender", NAMESPACE, group="coordination.k8s.io")
    )
    holder = lease["spec"]["holderIdentity"]
    names = {p["metadata"]["name"] for p in chart.api.pods(NAMESPACE) if "extender" in p["metadata"]["name"]}
    assert holder in names, (holder, names)


def test_kubectl_shows_the_webhooks_denial_through_its_service(work: Workloads) -> None:
    half = work.pod("half", {resources.NVIDIA_GPU: "0.5"})
    out = work.apply(half)
    assert 'admission webhook "pods.mutate.gpushare.aliyun.com" denied the request' in out, out
    assert "only whole GPUs are possible with nvidia.com/gpu" in out, out
    assert work.kubectl("get", "pods", "-o", "name") == ""


def test_a_gpu_mem_pod_is_routed_and_placed_through_the_services(work: Workloads) -> None:
    """The mutating webhook (through its Service) sets the second scheduler and the isolation pool; that
    kube-scheduler, a pod, calls the extender through its Service (DNS, client certificate), which binds."""
    work.apply(work.pod("share", {GPU_MEM: 2}))
    pod = work.running("share")
    assert pod["spec"]["schedulerName"] == "gpushare-scheduler"
    assert pod["spec"]["nodeSelector"] == {resources.ISOLATION_KEY: "false"}
    notes = pod["metadata"]["annotations"]
    assert notes["ALIYUN_COM_GPU_MEM_POD"] == "2" and notes["ALIYUN_COM_GPU_MEM_ASSIGNED"] == "true", notes
    events = json.loads(work.kubectl("get", "events", "-o", "json"))["items"]
    scheduled = [e for e in events if e["reason"] == "Scheduled" and e["involvedObject"]["name"] == "share"]
    assert [e["reportingComponent"] for e in scheduled] == ["gpushare-scheduler"], scheduled


def test_a_pod_without_gpus_never_waits_for_our_parts(work: Workloads) -> None:
    work.apply(work.pod("plain"))
    pod = work.running("plain")
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert "nodeSelector" not in pod["spec"]
