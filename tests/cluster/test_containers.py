"""Real containers get what we promise: the env the device plugin's Allocate answer gives, as the kubelet and
containerd apply it, matches the placement the extender wrote; a whole card beside shares; an MPS node's
env and mounts; and a DRA claim's env, which containerd injects from the CDI spec our driver wrote."""

from __future__ import annotations

from typing import Any

from tests.cluster.workloads import Workloads, node_mode, ready, wait
from tests.e2e import dra
from webhook.core.node import mps
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.devcluster.podrelease import FULLNAME, NAMESPACE
from webhook.gpus.inventory import fake_uuid

Obj = dict[str, Any]
GPU_MEM = resources.GPU_MEMORY
NODE = "gpu-node"


def _placement(pod: Obj) -> ann.Placement:
    found = ann.decode(pod["metadata"]["annotations"])
    assert found is not None, pod["metadata"]["annotations"]
    return found


def test_gpu_mem_pods_get_the_env_of_the_gpu_their_placement_names(work: Workloads) -> None:
    work.apply(work.pod("three", {GPU_MEM: 3}), work.pod("five", {GPU_MEM: 5}))
    for name, gib in (("three", 3), ("five", 5)):
        pod = work.running(name)
        notes = pod["metadata"]["annotations"]
        env = work.report(name)["env"]
        index = int(notes[resources.ANN_MEM_IDX])
        assert env[resources.ENV_VISIBLE_DEVICES] == fake_uuid(index), (name, env, notes)
        assert env[resources.ENV_MEM_IDX] == notes[resources.ANN_MEM_IDX]
        assert env[resources.ENV_MEM_POD] == notes[resources.ANN_MEM_POD] == str(gib)
        assert env[resources.ENV_MEM_CONTAINER] == str(gib)
        assert env[resources.ENV_MEM_DEV] == notes[resources.ANN_MEM_DEV] == "16"
        assert notes[resources.ANN_MEM_ASSIGNED] == "true"
        assert mps.ENV_MEM_LIMIT not in env  # mode share


def test_a_whole_card_beside_shares_gets_a_gpu_no_share_is_on(work: Workloads) -> None:
    work.apply(work.pod("share", {GPU_MEM: 4}))
    share_gpu = int(work.running("share")["metadata"]["annotations"][resources.ANN_MEM_IDX])
    work.apply(work.pod("card", {resources.NVIDIA_GPU: 1}))
    card = work.running("card")
    assert card["spec"]["schedulerName"] == "gpushare-scheduler"
    held = set(_placement(card).allocation.per_gpu())
    assert len(held) == 1 and share_gpu not in held, (held, share_gpu)
    env = work.report("card")["env"]
    assert env[resources.ENV_VISIBLE_DEVICES] == fake_uuid(held.pop())


def _plugin_log(work: Workloads) -> str:
    return work.cluster.kubectl(
        "logs", "-n", NAMESPACE, f"daemonset/{FULLNAME}-device-plugin", check=False
    ).stdout


def test_an_mps_node_gives_its_containers_the_mps_env_and_folders(work: Workloads) -> None:
    # The MPS control daemon makes these folders on a real node; the plugin's answer mounts them.
    dirs = (mps.DEFAULT_PIPE_DIRECTORY, mps.DEFAULT_LOG_DIRECTORY)
    assert work.cluster.net is not None
    work.cluster.net.run(["mkdir", "-p", *dirs])
    try:
        with node_mode(work, "mps"):
            # The plugin follows its Node's labels through a watch: wait until it serves the new mode.
            wait("the device plugin serving mode mps", lambda: "node mode mps" in _plugin_log(work), 60)
            pod = work.pod("mps", {GPU_MEM: 6})
            pod["metadata"]["annotations"] = {mps.COMPUTE_PERCENT_ANNOTATION: "30"}
            work.apply(pod)
            work.running("mps")
            report = work.report("mps")
            env = report["env"]
            assert env[mps.ENV_MEM_LIMIT] == "0=6144MB", env
            assert env[mps.ENV_THREAD_PERCENTAGE] == "30"
            assert env[mps.ENV_PIPE_DIRECTORY] == mps.DEFAULT_PIPE_DIRECTORY
            assert env[mps.ENV_LOG_DIRECTORY] == mps.DEFAULT_LOG_DIRECTORY
            assert set(dirs) <= set(report["mounts"]), report["mounts"]
    finally:
        work.cluster.net.run(["rm", "-rf", *dirs])


def test_a_dra_claim_reaches_its_container_through_our_cdi_spec(work: Workloads) -> None:
    with node_mode(work, "dra"):
        wait("the DRA driver Ready", lambda: ready(work.chart, "daemonsets", "dra-driver") == (1, 1), 180)
        wait(
            "the device plugin gone", lambda: ready(work.chart, "daemonsets", "device-plugin") == (0, 0), 120
        )
        claim = dra.claim("share", "3Gi")
        claim["metadata"]["namespace"] = work.namespace
        pod = work.pod("claimed")
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "share"}]
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        out = work.apply(claim, pod)
        assert "created" in out, out
        work.running("claimed", timeout=180)
        env = work.report("claimed")["env"]
        allocated = work.get("share", "resourceclaims", group="resource.k8s.io")["status"]["allocation"]
        device = allocated["devices"]["results"][0]["device"]
        index = int(device.rsplit("-", 1)[-1])
        assert env[resources.ENV_VISIBLE_DEVICES] == fake_uuid(index), (env, device)
        assert env[resources.ENV_MEM_IDX] == str(index)
        assert env[resources.ENV_MEM_POD] == env[resources.ENV_MEM_CONTAINER] == "3"
        assert env[resources.ENV_MEM_DEV] == "16"
        work.kubectl("delete", "pod", "claimed", "--wait=true")
