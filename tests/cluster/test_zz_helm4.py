"""The same chart with Helm 4 on the same cluster (server-side apply, its `--wait` watcher): once the Helm 3
release is uninstalled, every part comes up Ready again as pods and a GPU pod is placed and gets its GPU.
Last in the package (its file name), since it replaces the release the other tests share."""

from __future__ import annotations

from tests.cluster.test_chart_pods import every_part_ready
from tests.cluster.workloads import Workloads, wait
from webhook.core.wire import resources
from webhook.devcluster.podrelease import FULLNAME, NAMESPACE
from webhook.gpus.inventory import fake_uuid
from webhook.kube import rest


def test_helm_4_installs_the_chart_as_pods_that_become_ready(work: Workloads) -> None:
    chart = work.chart
    chart.uninstall(major=3)
    wait("the release's pods gone", lambda: not chart.api.pods(NAMESPACE), 180)
    chart.install(major=4)
    webhook = chart.api.request(
        "GET", rest.path("deployments", f"{FULLNAME}-webhook", NAMESPACE, group="apps")
    )
    managers = {(f["manager"], f["operation"]) for f in webhook["metadata"]["managedFields"]}
    assert ("helm", "Apply") in managers, managers  # Helm 4 applies server-side; Helm 3 would "Update"
    every_part_ready(chart)
    work.apply(work.pod("share", {resources.GPU_MEMORY: 3}))
    pod = work.running("share")
    index = int(pod["metadata"]["annotations"][resources.ANN_MEM_IDX])
    assert work.report("share")["env"][resources.ENV_VISIBLE_DEVICES] == fake_uuid(index)
