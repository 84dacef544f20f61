"""The chart installed with `helm install --wait`, every part a pod of our image on a node that runs
containers: each reaches Ready through its own probes, the certificate hook Job's work is in place and
the renewal CronJob's run renews a pair that is due, one extender replica leads, and the API server and
the chart's kube-scheduler reach our servers through their Services (the denial as kubectl shows it;
placements only the extender writes)."""

from __future__ import annotations

import base64
import json

from cryptography import x509

from tests.cluster.workloads import Workloads, our_pods, owned_by, ready, serving_pods, wait
from tests.e2e import certaging
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
    pods = serving_pods(chart)
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
    hooks = [j["metadata"]["name"] for j in jobs if not owned_by(j, "CronJob")]
    assert not hooks, "hook Jobs are deleted once they succeeded"


def test_the_renewal_cronjob_renews_a_certificate_due_and_the_pods_serve_it(work: Workloads) -> None:
    """selfManaged's CronJob, run now as its schedule runs it (under its own ServiceAccount and RBAC), on a
    release whose pods serve a pair due for renewal: the Secret gets a new CA and certificate; the
    caBundles trust it and still the CA the pods serve, so the API server's calls keep reaching the
    webhook; the pods then serve the new pair from their mount, with no restart. The Job's finished pod is
    no part of the release (every_part_ready)."""
    chart, api = work.chart, work.chart.api.api
    secret = f"{FULLNAME}-webhook-tls"
    configurations = [
        ("mutatingwebhookconfigurations", f"{FULLNAME}-mutating"),
        ("validatingwebhookconfigurations", f"{FULLNAME}-validating"),
    ]
    half = work.pod("half", {resources.NVIDIA_GPU: "0.5"})

    def answered() -> bool:  # the API server reached the webhook, trusting the pair it serves
        return "only whole GPUs are possible with nvidia.com/gpu" in work.apply(half)

    aged = certaging.age(api, secret, NAMESPACE, configurations)
    # What most of a year leaves: the pods serve the aged pair (the kubelet updates their mount).
    wait("every webhook replica serving the aged pair", lambda: _serve(chart, secret), 240, every=5)
    assert answered()
    job = "renew-now"
    chart.cluster.kubectl("create", "job", job, f"--from=cronjob/{FULLNAME}-certgen-renew", "-n", NAMESPACE)
    try:
        ended = wait("the renewal Job finished", lambda: _finished(chart, job), 180)
        logs = chart.cluster.kubectl("logs", f"job/{job}", "-n", NAMESPACE, "--all-containers", check=False)
        assert ended == "Complete", logs.stdout + logs.stderr
        renewed = certaging.secret_ca(api, secret, NAMESPACE)
        assert renewed != aged, "the CronJob renewed nothing"
        assert certaging.untrusting(api, renewed, configurations) == []
        assert certaging.untrusting(api, aged, configurations) == [], "the CA the pods serve was dropped"
        assert answered()
        wait("every webhook replica serving the renewed pair", lambda: _serve(chart, secret), 240, every=5)
        assert answered()
        every_part_ready(chart)  # restartCount 0: the pods reloaded; the Job's pod is no part
    finally:
        chart.cluster.kubectl("delete", "job", job, "-n", NAMESPACE, "--wait=true", check=False)


def _serve(chart: PodRelease, secret: str) -> bool:
    """Whether every webhook replica serves the Secret's certificate now (asked inside each pod)."""
    found = chart.api.request("GET", rest.path("secrets", secret, NAMESPACE))
    want = x509.load_pem_x509_certificate(base64.b64decode(found["data"]["tls.crt"]))
    pods = [p for p in our_pods(chart, "webhook") if not p["metadata"].get("deletionTimestamp")]
    for pod in pods:
        (port,) = [p["containerPort"] for p in pod["spec"]["containers"][0]["ports"] if p["name"] == "https"]
        ask = f"import ssl; print(ssl.get_server_certificate(('localhost', {port})))"
        argv = ("exec", "-n", NAMESPACE, pod["metadata"]["name"], "--", "python", "-c", ask)
        done = chart.cluster.kubectl(*argv, check=False)
        if done.returncode != 0 or x509.load_pem_x509_certificate(done.stdout.encode()) != want:
            return False
    return bool(pods)


def _finished(chart: PodRelease, job: str) -> str | None:
    """The Job's end once it has one: "Complete" or "Failed"; None while it runs."""
    found = chart.api.request("GET", rest.path("jobs", job, NAMESPACE, group="batch"))
    for condition in found.get("status", {}).get("conditions") or ():
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return str(condition["type"])
    return None


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
