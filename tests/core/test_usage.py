"""Matching NVML's processes to containers and shares: used beside allocated per GPU and per container,
and processes of no pod reported under their reason, never blamed on a pod."""

from __future__ import annotations

from tests.core.test_podshares import GIB, GPU_BYTES, running
from tests.deviceplugin.placed import placed_pod
from webhook.core.node import devices
from webhook.core.usage import cgroups, podshares, usage

GPUS = (devices.Gpu(0, "GPU-a", 16130, "V100"), devices.Gpu(1, "GPU-b", 16130, "V100"))


def _pods() -> list[podshares.PodShares]:
    train = running(placed_pod("train", [4], {0: {0: 4}}), c0="containerd://t0")
    serve = running(
        placed_pod("serve", [2, 2], {0: {1: 2}, 1: {1: 2}}), c0="containerd://s0", c1="containerd://s1"
    )
    web = running(placed_pod("web", [0], None), c0="containerd://w0")
    found = [podshares.pod_shares(p, GIB, GPU_BYTES) for p in (train, serve, web)]
    return [p for p in found if p is not None]


def _ref(pod: str, container: str) -> cgroups.ContainerRef:
    return cgroups.ContainerRef(f"uid-{pod}", container)


def test_every_share_is_listed_and_processes_add_up_per_container_and_gpu():
    samples = [
        usage.GpuSample(
            0,
            memory_used_bytes=7 * GIB,
            utilization=0.9,
            processes=(
                usage.ProcessSample(10, 3 * GIB, 0.5),
                usage.ProcessSample(11, 2 * GIB, 0.7),
            ),
            process_utilization=True,
        ),
        usage.GpuSample(
            1, memory_used_bytes=1 * GIB, utilization=0.1, processes=(usage.ProcessSample(20, 1 * GIB),)
        ),
    ]
    origins = {10: _ref("train", "t0"), 11: _ref("train", "t0"), 20: _ref("serve", "s0")}
    report = usage.attribute(
        node="n1", sampled_at=100.0, gpus=GPUS, unhealthy={1}, samples=samples, origins=origins, pods=_pods()
    )
    rows = {(c.pod, c.container, c.gpu): c for c in report.containers}
    assert set(rows) == {("train", "c0", 0), ("serve", "c0", 1), ("serve", "c1", 1)}
    train = rows[("train", "c0", 0)]
    assert (train.share_bytes, train.used_bytes, train.processes) == (4 * GIB, 5 * GIB, 2)
    assert train.utilization == 1.0  # 0.5 + 0.7, capped at the GPU's whole time
    assert train.above_share and not train.over_share  # the grace is the tracker's
    serve0 = rows[("serve", "c0", 1)]
    assert (serve0.used_bytes, serve0.utilization) == (GIB, None)  # GPU 1 offers no per-process figures
    assert rows[("serve", "c1", 1)].used_bytes == 0
    gpu0, gpu1 = report.gpus
    assert (gpu0.total_bytes, gpu0.allocated_bytes, gpu0.used_bytes, gpu0.utilization) == (
        16130 * podshares.MIB,
        4 * GIB,
        7 * GIB,
        0.9,
    )
    assert (gpu1.allocated_bytes, gpu1.healthy, gpu1.uuid) == (4 * GIB, False, "GPU-b")


def test_a_container_using_a_gpu_without_a_share_is_listed_with_a_share_of_zero():
    samples = [usage.GpuSample(1, processes=(usage.ProcessSample(30, GIB, 0.2),), process_utilization=True)]
    report = usage.attribute(
        node="n1",
        sampled_at=0.0,
        gpus=GPUS,
        unhealthy=(),
        samples=samples,
        origins={30: _ref("web", "w0")},
        pods=_pods(),
    )
    (web,) = [c for c in report.containers if c.pod == "web"]
    assert (web.gpu, web.share_bytes, web.used_bytes, web.utilization) == (1, 0, GIB, 0.2)
    assert web.above_share


def test_processes_of_no_pod_are_counted_per_reason_and_blamed_on_nobody():
    samples = [
        usage.GpuSample(
            0,
            processes=(
                usage.ProcessSample(1, GIB),  # on the host
                usage.ProcessSample(2, 2 * GIB),  # a pod this node does not run
                usage.ProcessSample(3, 3 * GIB),  # train's pod, but a container its status does not list
                usage.ProcessSample(4, 4 * GIB),  # gone before its cgroup was read
                usage.ProcessSample(5, None),  # memory the driver cannot tell
                usage.ProcessSample(6, GIB),  # in train's pod cgroup itself
            ),
        )
    ]
    origins = {
        1: None,
        2: cgroups.ContainerRef("uid-elsewhere", "x"),
        3: _ref("train", "new"),
        5: None,
        6: _ref("train", ""),
    }
    report = usage.attribute(
        node="n1", sampled_at=0.0, gpus=GPUS, unhealthy=(), samples=samples, origins=origins, pods=_pods()
    )
    assert report.gpus[0].unattributed == {
        usage.HOST: GIB,
        usage.OTHER_POD: 2 * GIB,
        usage.UNKNOWN_CONTAINER: 4 * GIB,
        usage.UNREADABLE: 4 * GIB,
    }
    assert all(c.used_bytes == 0 for c in report.containers)


def test_a_gpu_nvml_could_not_sample_has_no_figures_but_keeps_its_shares():
    report = usage.attribute(
        node="n1", sampled_at=0.0, gpus=GPUS, unhealthy=(), samples=[], origins={}, pods=_pods()
    )
    assert [(g.used_bytes, g.utilization) for g in report.gpus] == [(None, None), (None, None)]
    assert len(report.containers) == 3


def test_a_static_pod_is_found_by_its_config_hash():
    pod = running(placed_pod("etcd", [0], None), c0="containerd://e0")
    pod["metadata"]["annotations"][podshares.MIRROR_ANNOTATION] = "6a4e2c0b8d9f1e3a5c7b9d1f3e5a7c9b"
    shares = podshares.pod_shares(pod, GIB, GPU_BYTES)
    assert shares is not None
    samples = [usage.GpuSample(0, processes=(usage.ProcessSample(7, GIB),))]
    origins = {7: cgroups.ContainerRef("6A4E2C0B8D9F1E3A5C7B9D1F3E5A7C9B", "e0")}
    report = usage.attribute(
        node="n1", sampled_at=0.0, gpus=GPUS, unhealthy=(), samples=samples, origins=origins, pods=[shares]
    )
    assert [(c.pod, c.used_bytes) for c in report.containers] == [("etcd", GIB)]
