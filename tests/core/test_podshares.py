"""Each container's share of each GPU in bytes, its runtime IDs, and what the pod holds per GPU."""

from __future__ import annotations

from typing import Any

from tests.deviceplugin.placed import card_pod, placed_pod
from webhook.core.usage import podshares

GIB = 1 << 30
GPU_BYTES = {0: 16130 * podshares.MIB, 1: 16130 * podshares.MIB}


def running(pod: dict[str, Any], **ids: str) -> dict[str, Any]:
    pod["status"] = {
        "phase": "Running",
        "containerStatuses": [{"name": name, "containerID": cid} for name, cid in ids.items()],
    }
    return pod


def test_a_placed_containers_share_is_its_placement_in_bytes():
    pod = running(placed_pod("p", [4, 2], {0: {0: 4}, 1: {1: 2}}), c0="containerd://aaa", c1="cri-o://bbb")
    shares = podshares.pod_shares(pod, GIB, GPU_BYTES)
    assert shares is not None
    assert shares.shares == {("c0", 0): 4 * GIB, ("c1", 1): 2 * GIB}
    assert shares.containers == {"aaa": "c0", "bbb": "c1"}
    assert shares.held == {0: 4 * GIB, 1: 2 * GIB}
    assert (shares.namespace, shares.name, shares.cgroup_uids) == ("default", "p", frozenset({"uid-p"}))


def test_mib_blocks_count_in_their_size():
    pod = placed_pod("p", [32], {0: {1: 32}})
    shares = podshares.pod_shares(pod, 128 * podshares.MIB, GPU_BYTES)
    assert shares is not None and shares.shares == {("c0", 1): 4 * GIB}


def test_a_whole_cards_share_is_the_whole_gpu_though_the_ledger_counts_whole_units():
    pod = card_pod("card", {0: {1: 15}})
    shares = podshares.pod_shares(pod, GIB, GPU_BYTES)
    assert shares is not None
    assert shares.shares == {("c0", 1): 16130 * podshares.MIB}
    assert shares.held == {1: 15 * GIB}


def test_an_init_container_holds_a_share_but_the_pod_is_counted_once():
    pod = placed_pod("p", [4], {0: {0: 4}}, init_gpu_mem=[2])
    shares = podshares.pod_shares(pod, GIB, GPU_BYTES)
    assert shares is not None
    assert shares.shares == {("init0", 0): 2 * GIB, ("c0", 0): 4 * GIB}
    assert shares.held == {0: 4 * GIB}


def test_a_pod_asking_no_gpu_is_listed_with_no_share():
    shares = podshares.pod_shares(running(placed_pod("web", [0], None), c0="docker://ccc"), GIB, GPU_BYTES)
    assert shares is not None
    assert (shares.shares, shares.held, shares.containers) == ({}, {}, {"ccc": "c0"})


def test_a_pod_that_bypassed_the_extender_holds_nothing():
    shares = podshares.pod_shares(placed_pod("rogue", [4], None), GIB, GPU_BYTES)
    assert shares is not None and shares.shares == {} and shares.held == {}


def test_a_malformed_placement_holds_nothing_and_does_not_raise():
    pod = placed_pod("bad", [4], {0: {0: 4}})
    pod["metadata"]["annotations"]["scheduler.framework.gpushare.allocation"] = "{not json"
    shares = podshares.pod_shares(pod, GIB, GPU_BYTES)
    assert shares is not None and shares.shares == {} and shares.held == {}


def test_an_ended_pod_has_no_shares_and_no_series():
    assert (
        podshares.pod_shares(placed_pod("done", [4], {0: {0: 4}}, phase="Succeeded"), GIB, GPU_BYTES) is None
    )


def test_a_static_pods_cgroup_uid_is_its_config_hash():
    pod = placed_pod("etcd", [0], None)
    pod["metadata"]["annotations"][podshares.MIRROR_ANNOTATION] = "6A4E2C0B8D9F1E3A5C7B9D1F3E5A7C9B"
    shares = podshares.pod_shares(pod, GIB, GPU_BYTES)
    assert shares is not None
    assert shares.cgroup_uids == {"uid-etcd", "6a4e2c0b8d9f1e3a5c7b9d1f3e5a7c9b"}


def test_init_and_ephemeral_container_ids_are_read_and_odd_statuses_skipped():
    pod = placed_pod("p", [1], {0: {0: 1}})
    pod["status"] = {
        "phase": "Running",
        "initContainerStatuses": [{"name": "init", "containerID": "containerd://i1"}],
        "containerStatuses": [{"name": "c0"}, "junk", {"name": 3, "containerID": "containerd://x"}],
        "ephemeralContainerStatuses": [{"name": "debug", "containerID": "containerd://e1"}],
    }
    shares = podshares.pod_shares(pod, GIB, GPU_BYTES)
    assert shares is not None and shares.containers == {"i1": "init", "e1": "debug"}
