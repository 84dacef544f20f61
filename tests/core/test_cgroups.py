"""A process's pod and container from its cgroup file: every path shape of tests/data/cgroups."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.core.usage import cgroups

FIXTURES = Path(__file__).parents[1] / "data" / "cgroups"
UID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
CID = "5f2c9a0e4b7d1c3a8e6f0b2d4c6a8e0f1b3d5c7a9e1f3b5d7c9a1e3f5b7d9c1a"
IN_POD = cgroups.ContainerRef(UID, CID)

SHAPES = {
    "v2-systemd-containerd": IN_POD,
    "v2-systemd-crio": IN_POD,
    "v2-systemd-crio-subgroup": IN_POD,
    "v2-systemd-docker-guaranteed": IN_POD,
    "v2-cgroupfs-containerd": IN_POD,
    "v2-cgroup-namespace-relative": IN_POD,
    "v2-cgroupns-cgroupfs-relative": IN_POD,
    "v2-kind-node": IN_POD,
    "v1-cgroupfs-containerd": IN_POD,
    "v1-cgroupfs-crio": IN_POD,
    "v1-cgroupfs-docker-guaranteed": IN_POD,
    "v1-systemd-docker": IN_POD,
    "v1-kind-on-docker": IN_POD,
    "v1-static-pod": cgroups.ContainerRef("6a4e2c0b8d9f1e3a5c7b9d1f3e5a7c9b", CID),
    "v2-pod-cgroup-itself": cgroups.ContainerRef(UID, ""),
    "v2-crio-conmon": cgroups.ContainerRef(UID, ""),
    "host-service": None,
    "host-session-v1": None,
    "host-pod-lookalike": None,
    "empty": None,
}


def test_every_fixture_file_has_an_expectation():
    assert {p.stem for p in FIXTURES.glob("*.cgroup")} == set(SHAPES)


@pytest.mark.parametrize(("shape", "expected"), SHAPES.items(), ids=list(SHAPES))
def test_the_pod_and_container_of_each_path_shape(shape, expected):
    assert cgroups.container_of((FIXTURES / f"{shape}.cgroup").read_text()) == expected


@pytest.mark.parametrize(
    "text",
    ["garbage", "0:/kubepods", "::::", "0::/kubepods/burstable/podnot-a-uid/abc", "\x00\x01"],
    ids=["no-colons", "two-fields", "only-colons", "bad-uid", "binary"],
)
def test_unreadable_lines_mean_no_pod(text):
    assert cgroups.container_of(text) is None


def test_a_container_id_with_odd_characters_is_not_trusted():
    text = f"0::/kubepods/besteffort/pod{UID}/..%2f..%2fetc"
    assert cgroups.container_of(text) == cgroups.ContainerRef(UID, "")


@pytest.mark.parametrize(
    ("status_id", "runtime_id"),
    [("containerd://abc", "abc"), ("cri-o://abc", "abc"), ("docker://abc", "abc"), ("abc", "abc")],
)
def test_the_runtime_id_of_a_status_container_id(status_id, runtime_id):
    assert cgroups.runtime_container_id(status_id) == runtime_id
