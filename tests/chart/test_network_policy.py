"""Only kube-scheduler (and the extender's own replicas) may reach the extender; no NodePort by default."""

from __future__ import annotations

from typing import Any

from tests.chart import render


def _peers(values: dict[str, Any]) -> list[dict[str, Any]]:
    policy = render.find(render.render(values), "NetworkPolicy", "-extender")
    rule = policy["spec"]["ingress"][0]
    assert rule["ports"] == [{"port": 39999, "protocol": "TCP"}]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    peers: list[dict[str, Any]] = rule["from"]
    return peers


def test_the_extender_admits_only_schedulers_and_its_replicas() -> None:
    components = [
        p.get("podSelector", {}).get("matchLabels", {}) for p in _peers({"scheduler": {"mode": "second"}})
    ]
    assert [c.get("app.kubernetes.io/component") for c in components[:2]] == ["extender", "scheduler"]
    assert components[2] == {"component": "kube-scheduler"}  # kubeadm's static pod, mode (a)
    # Mode (a) has no second scheduler to admit.
    assert len(_peers({})) == 2


def test_extra_peers_are_appended_for_host_network_schedulers() -> None:
    extra = {"ipBlock": {"cidr": "10.0.0.0/24"}}
    assert _peers({"extender": {"networkPolicy": {"extraFrom": [extra]}}})[-1] == extra


def test_over_http2_extra_peers_also_reach_the_probe_port_for_metrics() -> None:
    extra = {"ipBlock": {"cidr": "10.1.0.0/16"}}
    policy = render.find(
        render.render({"extender": {"networkPolicy": {"extraFrom": [extra]}}}), "NetworkPolicy", "-extender"
    )
    scheduler, probes = policy["spec"]["ingress"]
    assert scheduler["ports"] == [{"port": 39999, "protocol": "TCP"}]
    assert probes == {"ports": [{"port": 8081, "protocol": "TCP"}], "from": [extra]}


def test_no_node_port_unless_asked() -> None:
    service = render.find(render.render(), "Service", "-extender")
    assert service["spec"]["type"] == "ClusterIP"
    assert all("nodePort" not in p for p in service["spec"]["ports"])


def test_the_policy_can_be_left_out() -> None:
    objects = render.render({"extender": {"networkPolicy": {"enabled": False}}})
    assert not [o for o in objects if o["kind"] == "NetworkPolicy"]
