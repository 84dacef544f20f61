"""Node modes, what a gpu-mem pod may do on each, and the placement order pod > node > default."""

from __future__ import annotations

import pytest
import yaml

from webhook.core.admission import verdict
from webhook.core.placement import modes
from webhook.core.placement.allocator import Policy
from webhook.core.wire import resources


@pytest.mark.parametrize(
    ("labels", "mode"),
    [
        ({}, modes.Mode.SHARE),
        ({modes.MODE_LABEL: "cgpu"}, modes.Mode.CGPU),
        ({modes.MODE_LABEL: "mps"}, modes.Mode.MPS),
    ],
    ids=["unlabelled-is-legacy-share", "cgpu", "mps"],
)
def test_node_mode_reads_the_ack_label_and_an_unlabelled_node_keeps_sharing(labels, mode):
    assert modes.node_mode(labels) is mode
    assert mode.shares


def test_an_unknown_mode_value_is_refused_naming_the_label_and_the_values():
    with pytest.raises(
        modes.ModeError, match=r"ack.node.gpu.schedule='Cgpu' is not a known mode; use one of"
    ):
        modes.node_mode({modes.MODE_LABEL: "Cgpu"})


@pytest.mark.parametrize("mode", ["share", "cgpu", "mps"])
def test_sharing_modes_take_gpu_memory_pods(mode):
    assert modes.sharing_problem({modes.MODE_LABEL: mode}) is None


@pytest.mark.parametrize("mode", ["default", "topology"])
def test_whole_card_modes_refuse_gpu_memory_pods_naming_the_label_value(mode):
    problem = modes.sharing_problem({modes.MODE_LABEL: mode})
    assert problem is not None
    assert f"node label ack.node.gpu.schedule={mode}: the node serves whole GPUs only" in problem
    assert resources.GPU_MEMORY in problem


def test_an_unknown_mode_refuses_gpu_memory_pods_with_the_labels_problem():
    assert "is not a known mode" in str(modes.sharing_problem({modes.MODE_LABEL: "fast"}))


@pytest.mark.parametrize(
    ("pod", "node", "expected"),
    [
        ({resources.PLACEMENT_POLICY_ANNOTATION: "binpack"}, Policy.SPREAD, Policy.BINPACK),
        ({}, Policy.SPREAD, Policy.SPREAD),
        ({}, None, Policy.BINPACK),
        ({resources.PLACEMENT_POLICY_ANNOTATION: "sideways"}, Policy.SPREAD, Policy.SPREAD),
    ],
    ids=["pod-wins", "node-over-default", "default", "unknown-pod-value-falls-to-node"],
)
def test_placement_order_is_pod_annotation_then_node_label_then_default(pod, node, expected):
    assert modes.placement_policy(pod, node, Policy.BINPACK) is expected


def test_node_placement_label_unknown_or_absent_gives_none():
    assert modes.node_placement({modes.PLACEMENT_LABEL: "spread"}) is Policy.SPREAD
    assert modes.node_placement({modes.PLACEMENT_LABEL: "tight"}) is None
    assert modes.node_placement(None) is None


@pytest.mark.parametrize("mode", ["dra", "dra-mps"])
def test_dra_modes_are_served_by_the_dra_driver_and_refuse_gpu_memory_pods_saying_so(mode):
    found = modes.node_mode({modes.MODE_LABEL: mode})
    assert found.dra
    assert not found.shares
    problem = modes.sharing_problem({modes.MODE_LABEL: mode})
    assert problem is not None
    assert f"ack.node.gpu.schedule={mode}: the node's GPUs are shared through DRA ResourceClaims" in problem
    # The claim to write instead, in the chart's share class; never the node's name (kube-scheduler
    # counts nodes per distinct reason).
    assert (
        "name in spec.resourceClaims a ResourceClaimTemplate with spec: {spec: {devices: {requests: "
        "[{name: gpu, exactly: {deviceClassName: gpushare-memory, capacity: {requests: {memory: <N>Gi}}}}]}}}"
    ) in problem
    assert "deviceClassName: mem," in str(modes.sharing_problem({modes.MODE_LABEL: mode}, share_class="mem"))


def test_the_dra_reason_gives_a_template_the_claim_rules_accept():
    problem = str(modes.sharing_problem({modes.MODE_LABEL: "dra"}))
    shape = problem.split("ResourceClaimTemplate with ", 1)[1].split(", or send", 1)[0]
    body = yaml.safe_load(shape.replace("<N>Gi", "3Gi"))
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", **body}
    found = verdict.evaluate(obj, verdict.Policy())
    assert found.allowed and not found.warnings
    (request,) = obj["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"]["requests"]["memory"] == "3Gi"


@pytest.mark.parametrize("mode", ["share", "cgpu", "mps", "default", "topology"])
def test_other_modes_are_not_dra(mode):
    assert not modes.Mode(mode).dra
