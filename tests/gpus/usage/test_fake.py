"""Declared GPU processes (--fake-processes) and the cgroup reader over a proc folder of fixture files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from webhook.core.node import devices
from webhook.core.usage import cgroups, usage
from webhook.gpus import inventory
from webhook.gpus.cgroupreader import CgroupReader
from webhook.gpus.usage import source as usagesource
from webhook.gpus.usage.fake import FakeUsage, read_processes

GPUS = (devices.Gpu(0, "GPU-a", 16384), devices.Gpu(1, "GPU-b", 16384))
FIXTURES = Path(__file__).parents[2] / "data" / "cgroups"
GIB = 1 << 30


def test_declared_processes_make_each_gpus_figures(tmp_path):
    path = tmp_path / "procs.yaml"
    source = FakeUsage(GPUS, path)
    assert [s.processes for s in source.sample()] == [(), ()]  # no file yet: no processes
    path.write_text(
        "processes:\n"
        "  - {gpu: 0, pid: 10, memory: 2GiB, utilization: 0.5}\n"
        "  - {gpu: 0, pid: 11, memory: 512MiB, utilization: 0.75}\n"
        "  - {gpu: 1, pid: 12, memory: 1}\n"
    )
    gpu0, gpu1 = source.sample()
    assert gpu0.processes == (
        usage.ProcessSample(10, 2 * GIB, 0.5),
        usage.ProcessSample(11, 512 << 20, 0.75),
    )
    assert (gpu0.memory_used_bytes, gpu0.utilization, gpu0.process_utilization) == (2.5 * GIB, 1.0, True)
    assert (gpu1.memory_used_bytes, gpu1.utilization) == (GIB, 0.0)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("processes: {}", "expected 'processes: [{gpu: 0"),
        ("processes: [7]", "processes[0]: must be a mapping"),
        ("processes: [{gpu: 5, pid: 1, memory: 1}]", "processes[0]: gpu 5 is not one of the GPUs [0, 1]"),
        ("processes: [{gpu: 0, pid: 0, memory: 1}]", "processes[0]: pid 0 is not a process ID"),
        ("processes: [{gpu: 0, pid: true, memory: 1}]", "processes[0]: pid True is not a process ID"),
        ("processes: [{gpu: 0, pid: 1, memory: lots}]", "memory 'lots' must be a positive whole number"),
        ("processes: [{gpu: 0, pid: 1, memory: 1, utilization: 2}]", "utilization 2 is not a ratio"),
        ("processes: [", "not YAML/JSON"),
    ],
    ids=["not-a-list", "not-a-mapping", "unknown-gpu", "pid-0", "pid-bool", "bad-memory", "ratio", "yaml"],
)
def test_a_bad_file_is_refused_naming_the_entry_and_the_last_good_one_is_kept(tmp_path, caplog, text, needle):
    path = tmp_path / "procs.yaml"
    path.write_text("processes: [{gpu: 0, pid: 10, memory: 1}]\n")
    source = FakeUsage(GPUS, path)
    assert [p.pid for p in source.sample()[0].processes] == [10]
    path.write_text(text)
    with pytest.raises(inventory.InventoryError) as caught:
        read_processes(path, (0, 1))
    assert needle in str(caught.value)
    assert [p.pid for p in source.sample()[0].processes] == [10]
    assert needle in caplog.text


def test_the_source_is_nvml_for_nvml_gpus_and_the_file_for_declared_ones(tmp_path):
    assert isinstance(usagesource.source(inventory.parse_fake_gpus("0:16"), tmp_path / "p"), FakeUsage)


def test_the_cgroup_reader_maps_pids_through_a_proc_folder(tmp_path):
    for pid, shape in ((10, "v2-systemd-containerd"), (11, "host-service"), (12, "v1-cgroupfs-crio")):
        (tmp_path / str(pid)).mkdir()
        shutil.copy(FIXTURES / f"{shape}.cgroup", tmp_path / str(pid) / "cgroup")
    (tmp_path / "13").mkdir()  # a process whose cgroup file went away
    found = CgroupReader(tmp_path).origins([10, 11, 12, 13, 14])
    assert set(found) == {10, 11, 12}  # 13 and 14 unreadable
    assert found[11] is None
    assert found[10] == found[12] == cgroups.container_of((FIXTURES / "v1-cgroupfs-crio.cgroup").read_text())


def test_a_proc_root_that_is_no_folder_is_said_once(tmp_path, caplog):
    reader = CgroupReader(tmp_path / "host" / "proc")
    assert reader.origins([1, 2]) == {}
    assert reader.origins([3]) == {}
    assert caplog.text.count("is not a folder: GPU processes cannot be matched to pods") == 1
