"""GPU usage through NVML, against the fake pynvml (tests/gpus/fakenvml.py): processes with their memory,
utilisation per process from the newer call or the older one, and every failure reported as unknown."""

from __future__ import annotations

from tests.gpus.fakenvml import GIB, FakeNvml
from webhook.core.node import devices
from webhook.core.usage import usage
from webhook.gpus.usage.nvml import NvmlUsage

GPUS = (devices.Gpu(0, "GPU-a", 16384), devices.Gpu(1, "GPU-b", 16384))


def _by_pid(sample: usage.GpuSample) -> dict[int, usage.ProcessSample]:
    return {p.pid: p for p in sample.processes}


def test_processes_appear_grow_and_go_with_their_memory():
    nvml = FakeNvml()
    source = NvmlUsage(nvml, GPUS)
    nvml.start(0, 100, 2 * GIB)
    first, second = source.sample()
    assert _by_pid(first)[100].memory_bytes == 2 * GIB
    assert first.memory_used_bytes == 2 * GIB + (300 << 20)  # the driver's reserve is in "used"
    assert second.processes == ()
    nvml.grow(0, 100, 5 * GIB)
    nvml.start(1, 200, GIB)
    first, second = source.sample()
    assert _by_pid(first)[100].memory_bytes == 5 * GIB and [p.pid for p in second.processes] == [200]
    nvml.stop(0, 100)
    assert source.sample()[0].processes == ()


def test_utilisation_per_process_is_the_mean_of_the_samples_since_the_last_poll():
    nvml = FakeNvml()
    source = NvmlUsage(nvml, GPUS)
    nvml.gpus[0].utilization = 80
    nvml.start(0, 100, GIB, sm=30)
    nvml.start(0, 101, GIB, sm=0)  # idle: leaves no sample, so 0
    nvml.tick()
    nvml.gpus[0].sm[100] = 50
    nvml.tick()
    gpu0 = source.sample()[0]
    assert gpu0.utilization == 0.8 and gpu0.process_utilization
    assert _by_pid(gpu0)[100].utilization == 0.4 and _by_pid(gpu0)[101].utilization == 0.0
    # Nothing new since: every process idle for this poll (NVML_ERROR_NOT_FOUND), still offered.
    gpu0 = source.sample()[0]
    assert gpu0.process_utilization and _by_pid(gpu0)[100].utilization == 0.0
    nvml.tick()
    assert _by_pid(source.sample()[0])[100].utilization == 0.5  # only the newest sample


def test_a_driver_without_the_newer_call_falls_back_to_the_older_one_for_good():
    nvml = FakeNvml(new_api=False)
    source = NvmlUsage(nvml, GPUS)
    nvml.start(0, 100, GIB, sm=70)
    nvml.tick()
    assert _by_pid(source.sample()[0])[100].utilization == 0.7
    nvml.calls.clear()
    source.sample()
    assert "utilization info" not in nvml.calls and "process utilization" in nvml.calls


def test_without_per_process_utilisation_the_figure_is_absent_not_zero():
    nvml = FakeNvml(per_process=False)
    source = NvmlUsage(nvml, GPUS)
    nvml.start(0, 100, GIB, sm=70)
    nvml.tick()
    gpu0 = source.sample()[0]
    assert not gpu0.process_utilization and _by_pid(gpu0)[100].utilization is None
    nvml.calls.clear()
    source.sample()
    assert not any("utiliz" in c for c in nvml.calls if c != "utilization")  # not asked again


def test_mps_clients_are_counted_once_beside_compute_processes():
    nvml = FakeNvml()
    nvml.start(0, 100, 3 * GIB)
    nvml.start(0, 100, 2 * GIB, mps=True)  # the same PID in both lists
    nvml.start(0, 101, GIB, mps=True)
    gpu0 = NvmlUsage(nvml, GPUS).sample()[0]
    assert {p.pid: p.memory_bytes for p in gpu0.processes} == {100: 3 * GIB, 101: GIB}


def test_memory_the_driver_cannot_tell_stays_unknown():
    nvml = FakeNvml()
    nvml.start(0, 100, None)
    assert NvmlUsage(nvml, GPUS).sample()[0].processes == (usage.ProcessSample(100, None, 0.0),)


def test_a_failing_call_makes_that_figure_unknown_and_the_rest_still_reads(caplog):
    nvml = FakeNvml()
    nvml.start(0, 100, GIB)
    nvml.start(1, 200, GIB)
    nvml.broken[("memory", 0)] = FakeNvml.NVML_ERROR_GPU_IS_LOST
    nvml.broken[("processes", 1)] = FakeNvml.NVML_ERROR_GPU_IS_LOST
    nvml.broken[("process utilization", 0)] = FakeNvml.NVML_ERROR_GPU_IS_LOST
    nvml.broken[("utilization info", 0)] = FakeNvml.NVML_ERROR_GPU_IS_LOST
    source = NvmlUsage(nvml, GPUS)
    gpu0, gpu1 = source.sample()
    assert gpu0.memory_used_bytes is None and [p.pid for p in gpu0.processes] == [100]
    assert gpu0.process_utilization is False  # this poll only
    assert gpu1.memory_used_bytes is not None and gpu1.processes == ()
    source.sample()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 3  # once per GPU and call, not per poll
    assert "GPU 0: reading its memory through NVML failed" in warnings[0]
    del nvml.broken[("utilization info", 0)]
    assert source.sample()[0].process_utilization
