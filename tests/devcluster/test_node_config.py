"""What the test node is configured with, read back as its programs read it: containerd's TOML, the CNI
network list, cluster DNS's objects, the node's addresses, and where the built programs are found. The
node itself runs in tests/cluster (root); these run anywhere."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from webhook.devcluster import binaries, clusterdns, nodenet
from webhook.devcluster.containerd import Containerd
from webhook.devcluster.nodenet import NodeNamespaces

Obj = dict[str, Any]


@pytest.fixture
def net(tmp_path: Path) -> NodeNamespaces:
    return NodeNamespaces(tmp_path / "node", slot=7, sockets=tmp_path / "s")


def test_a_slot_gives_ranges_that_do_not_overlap_and_a_gateway_in_the_pod_range(net: NodeNamespaces) -> None:
    link = ipaddress.ip_network(f"{net.host_ip}/30", strict=False)
    pods, services = ipaddress.ip_network(net.pod_cidr), ipaddress.ip_network(net.service_cidr)
    assert ipaddress.ip_address(net.node_ip) in link and net.host_ip != net.node_ip
    assert not link.overlaps(pods) and not link.overlaps(services) and not pods.overlaps(services)
    assert ipaddress.ip_address(net.pod_gateway) in pods
    assert ipaddress.ip_address(net.dns_ip) in services
    assert len(net.host_link) <= 15  # the kernel's limit on an interface name, with the "p" of its peer
    assert len(net.host_link + "p") <= 15


def test_each_node_folder_lies_in_its_workdir(net: NodeNamespaces) -> None:
    folders = {net.folder(path) for path in nodenet.NODE_FOLDERS}
    assert len(folders) == len(nodenet.NODE_FOLDERS)
    assert all(folder.is_relative_to(net.workdir) for folder in folders)


def test_containerds_config_is_toml_with_what_the_machines_need(net: NodeNamespaces, tmp_path: Path) -> None:
    config = tomllib.loads(Containerd(tmp_path / "bins", net, "localhost/pause:x").config())
    assert config["version"] == 3
    assert config["grpc"]["address"] == str(net.sockets / "containerd.sock")
    assert len(config["grpc"]["address"]) < 100  # a unix socket path
    images = config["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == "localhost/pause:x"
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE here
    assert runtime["netns_mounts_under_state_dir"] is True
    assert runtime["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"]["SystemdCgroup"] is False  # the kubelet's cgroupfs
    assert runtime["cni"]["bin_dirs"] == [str(tmp_path / "bins" / "cni")]


def test_the_pods_network_is_the_nodes_pod_range_behind_its_gateway(
    net: NodeNamespaces, tmp_path: Path
) -> None:
    network = Containerd(tmp_path / "bins", net, "localhost/pause:x").cni_config()
    bridge = network["plugins"][0]  # type: ignore[index]
    assert bridge["type"] == "bridge" and bridge["isGateway"] is True and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": net.pod_cidr, "gateway": net.pod_gateway}]]


def test_cluster_dns_answers_for_the_cluster_and_forwards_nothing() -> None:
    objects = {o["kind"]: o for o in clusterdns.manifests("localhost/coredns:v1", "10.96.7.10")}
    corefile = objects["ConfigMap"]["data"]["Corefile"]
    assert "kubernetes cluster.local" in corefile
    assert "forward" not in corefile  # no query leaves the machine
    assert objects["Service"]["spec"]["clusterIP"] == "10.96.7.10"
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["imagePullPolicy"] == "Never"
    assert pod["dnsPolicy"] == "Default"
    assert pod["securityContext"]["runAsNonRoot"] is True
    # Two replicas kept apart where nodes allow: losing one node leaves the cluster its names.
    assert objects["Deployment"]["spec"]["replicas"] == 2
    (apart,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert apart["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert apart["podAffinityTerm"]["labelSelector"]["matchLabels"] == objects["Service"]["spec"]["selector"]


def _built(folder: Path, names: tuple[str, ...]) -> Path:
    for name in names:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    return folder


def test_the_runtime_is_the_newest_complete_build_or_the_one_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "runtime-bins"
    monkeypatch.setenv("RUNTIME_BINS_CACHE", str(cache))
    monkeypatch.delenv(binaries.RUNTIME_ENV, raising=False)
    assert binaries.runtime() is None
    older = _built(cache / "a", binaries.RUNTIME_NAMES)
    _built(cache / "b", binaries.RUNTIME_NAMES[:-1])  # incomplete: never chosen
    os.utime(older, (1, 1))
    assert binaries.runtime() == older
    newer = _built(cache / "c", binaries.RUNTIME_NAMES)
    assert binaries.runtime() == newer
    monkeypatch.setenv(binaries.RUNTIME_ENV, str(older))
    assert binaries.runtime() == older
    monkeypatch.setenv(binaries.RUNTIME_ENV, str(cache / "b"))
    assert binaries.runtime() is None


def test_a_slot_is_skipped_where_a_route_of_the_machine_covers_its_ranges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken = [ipaddress.ip_network("10.244.1.0/24"), ipaddress.ip_network("10.96.2.0/24")]
    monkeypatch.setattr(nodenet, "_routed", lambda: taken)
    tried: list[list[str]] = []

    class Done:
        returncode = 0

    def run(argv: list[str], **kwargs: Any) -> Done:
        tried.append(argv)
        return Done()

    monkeypatch.setattr(subprocess, "run", run)  # the veth pair is made, in this test, by nobody
    net = NodeNamespaces(Path("/nonexistent"), sockets=Path("/nonexistent"))
    net._claim_slot()
    assert net.slot == 3
    assert tried == [["ip", "link", "add", "gsnode3", "type", "veth", "peer", "name", "gsnode3p"]]


def test_a_further_node_shares_the_first_ones_services_and_takes_a_slot_beside_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = NodeNamespaces(Path("/nonexistent"), slot=1, sockets=Path("/nonexistent"))
    # What the machine routes once the first node runs: its pod and Service ranges.
    taken = [ipaddress.ip_network(first.pod_cidr), ipaddress.ip_network(first.service_cidr)]
    monkeypatch.setattr(nodenet, "_routed", lambda: taken)

    class Done:
        returncode = 0

    monkeypatch.setattr(subprocess, "run", lambda argv, **kwargs: Done())
    second = NodeNamespaces(Path("/nonexistent"), sockets=Path("/nonexistent"), first=first)
    second._claim_slot()
    assert second.slot == 2
    assert (second.service_cidr, second.dns_ip) == (first.service_cidr, first.dns_ip)
    assert second.pod_cidr == "10.244.2.0/24"
    # Both inside the ranges every node routes through the host: the other nodes reach it.
    assert ipaddress.IPv4Network(second.pod_cidr).subnet_of(ipaddress.IPv4Network(nodenet.CLUSTER_PODS))
    assert ipaddress.IPv4Address(second.node_ip) in ipaddress.IPv4Network(nodenet.CLUSTER_LINKS)
