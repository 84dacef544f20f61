"""Step 2 of docs/migrate.md with the real DaemonSet controller: the doc's patch of the original's device
plugin DaemonSet, run as written, and our DaemonSet's node selection as the chart renders it with the
migration's value keep exactly one of the two plugins on each `gpushare=true` node, and one node label
moves a node from the original's plugin to ours and back, the other nodes' plugin pods untouched.

The bed runs no default scheduler and these nodes no kubelet, and the controller finds a DaemonSet's pods
by their node name: the test binds each new plugin pod to the node it is aimed at, and ends the deletion of
those the controller deletes, as those two would.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Mapping
from typing import Any

from tests.chart import render
from tests.e2e import objects
from tests.e2e.bed import Bed
from tests.e2e.test_doc_shell_blocks import blocks
from webhook.core.wire import resources
from webhook.kube import errors, pods, rest

MIGRATED = "gpushare-migrated"  # the node label that moves a node to our device plugin
THEIRS_NAME = "gpushare-device-plugin-ds"  # the original's DaemonSet, in kube-system
GROUP = "migration-ds"


def _daemonset(bed: Bed, name: str, namespace: str, selection: Mapping[str, Any]) -> dict[str, Any]:
    """A DaemonSet whose pods are placed by `selection` (nodeSelector, affinity), on this test's nodes."""
    labels = {"app": "e2e-migration", "daemonset": name}
    spec: dict[str, Any] = {**selection, "containers": [objects.container("plugin")]}
    objects.in_group({"spec": spec}, GROUP)
    body = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }
    stored: dict[str, Any] = bed.request(
        "POST", rest.path("daemonsets", namespace=namespace, group="apps"), body=body
    )
    return stored


def _aimed(bed: Bed, daemonset: Mapping[str, Any]) -> dict[str, str]:
    """Node -> UID of the DaemonSet's pod there. Plays, for these pods, the default scheduler and the
    kubelet the bare nodes lack (the controller looks for a DaemonSet's pods by their node name): binds
    each new pod to the node it is aimed at, and ends the deletion of a pod the controller deleted."""
    meta = daemonset["metadata"]
    selector = _selector(daemonset)
    found: dict[str, str] = {}
    listed = rest.list_all(
        bed.api, rest.path("pods", namespace=meta["namespace"]), query={"labelSelector": selector}
    )
    for pod in listed:
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        with contextlib.suppress(errors.NotFoundError, errors.ConflictError):
            if pod["metadata"].get("deletionTimestamp"):
                bed.request(
                    "DELETE", rest.path("pods", name, meta["namespace"]), query={"gracePeriodSeconds": 0}
                )
                continue
            node = pod["spec"].get("nodeName") or _aimed_at(pod)
            if not pod["spec"].get("nodeName"):
                pods.bind_pod(bed.api, meta["namespace"], name, uid, node)
            found[node] = uid
    return found


def _selector(daemonset: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in daemonset["spec"]["selector"]["matchLabels"].items())


def _aimed_at(pod: Mapping[str, Any]) -> str:
    """The node a DaemonSet's unscheduled pod is for: its controller's affinity to the node's name."""
    required = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    (node,) = [
        f["values"][0] for term in required["nodeSelectorTerms"] for f in term.get("matchFields") or []
    ]
    return str(node)


def _run_doc_block(bed: Bed, needle: str) -> None:
    """Run the shell block of docs/migrate.md that holds `needle`, as written, with kubectl."""
    (block,) = [b for b in blocks() if b.file.name == "migrate.md" and needle in b.code]
    path = f"{bed.cp.bins}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "KUBECONFIG": str(bed.cp.admin_kubeconfig), "PATH": path}
    argv = ["bash", "-e", "-o", "pipefail", "-c", block.code]
    run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, f"{block.where} exited {run.returncode}: {run.stderr}"


def test_one_node_label_moves_a_node_from_the_original_plugin_to_ours_and_back(bed: Bed) -> None:
    nodes = [f"{GROUP}-{i}" for i in range(2)]
    for name in nodes:
        bed.node(name, 2, 16, labels={resources.GPUSHARE_NODE_LABEL: "true"}, group=GROUP)
    ns = bed.namespace("e2e-migration-ds")
    # The original's device-plugin-ds.yaml: its name, namespace and node selector.
    theirs = _daemonset(
        bed, THEIRS_NAME, "kube-system", {"nodeSelector": {resources.GPUSHARE_NODE_LABEL: "true"}}
    )
    rendered = render.find(
        render.render({"devicePlugin": {"nodeSelector": {MIGRATED: "true"}}}), "DaemonSet", "-device-plugin"
    )
    chosen = rendered["spec"]["template"]["spec"]
    ours = _daemonset(bed, "gpushare-device-plugin", ns, {k: chosen[k] for k in ("affinity", "nodeSelector")})
    try:
        bed.wait("the original's plugin on both nodes", lambda: set(_aimed(bed, theirs)) == set(nodes))
        before = _aimed(bed, theirs)
        assert _aimed(bed, ours) == {}
        _run_doc_block(bed, "patch daemonset gpushare-device-plugin-ds")
        path = rest.path("daemonsets", THEIRS_NAME, "kube-system", group="apps")

        def observed() -> bool:
            stored = bed.request("GET", path)
            return bool(stored["status"].get("observedGeneration") == stored["metadata"]["generation"])

        bed.wait("the DaemonSet controller to see the patch", observed)
        assert _aimed(bed, theirs) == before  # OnDelete: no plugin pod restarted for the new template

        bed.request(
            "PATCH",
            rest.path("nodes", nodes[0]),
            body={"metadata": {"labels": {MIGRATED: "true"}}},
            content_type=rest.MERGE_PATCH,
        )
        bed.wait("ours on the labelled node only", lambda: set(_aimed(bed, ours)) == {nodes[0]})
        bed.wait("the original's plugin gone from it", lambda: set(_aimed(bed, theirs)) == {nodes[1]})
        assert _aimed(bed, theirs)[nodes[1]] == before[nodes[1]]

        bed.request(
            "PATCH",
            rest.path("nodes", nodes[0]),
            body={"metadata": {"labels": {MIGRATED: None}}},
            content_type=rest.MERGE_PATCH,
        )
        bed.wait("the original's plugin back", lambda: set(_aimed(bed, theirs)) == set(nodes))
        bed.wait("ours gone", lambda: _aimed(bed, ours) == {})
        assert _aimed(bed, theirs)[nodes[1]] == before[nodes[1]]
    finally:
        for daemonset in (theirs, ours):
            meta = daemonset["metadata"]
            bed.request("DELETE", rest.path("daemonsets", meta["name"], meta["namespace"], group="apps"))
            query = {"labelSelector": _selector(daemonset), "gracePeriodSeconds": 0}
            bed.request("DELETE", rest.path("pods", namespace=meta["namespace"]), query=query)
