"""Health watchers: a file for fake inventories; NVML XID events against a fake NVML module."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from webhook.core.node import devices
from webhook.gpus import health, inventory


def test_file_health_reads_indexes_and_keeps_the_last_good_state(tmp_path):
    path = tmp_path / "unhealthy"
    watcher = health.FileHealth(path)
    assert watcher.read() == frozenset()
    path.write_text("0, 2\n")
    assert watcher.read() == frozenset({0, 2})
    path.write_text("zero")
    assert watcher.read() is None


def test_file_health_reports_changes_from_its_thread(tmp_path):
    path = tmp_path / "unhealthy"
    seen: list[frozenset[int]] = []
    changed = threading.Event()
    stop = threading.Event()

    def on_change(value):
        seen.append(value)
        changed.set()

    thread = threading.Thread(target=health.FileHealth(path, interval=0.02).run, args=(stop, on_change))
    thread.start()
    try:
        path.write_text("1")
        assert changed.wait(5)
    finally:
        stop.set()
        thread.join(5)
    assert seen == [frozenset({1})]


class FakeNvml:
    """Just what NvmlHealth calls; events are queued by the test."""

    class NVMLError(Exception):
        def __init__(self, value):
            super().__init__(value)
            self.value = value

    NVML_ERROR_TIMEOUT = 10
    nvmlEventTypeXidCriticalError = 8  # noqa: N815

    def __init__(self):
        self.events: list[SimpleNamespace] = []
        self.broken: set[int] = set()

    def nvmlEventSetCreate(self):  # noqa: N802
        return "set"

    def nvmlEventSetFree(self, events):  # noqa: N802
        pass

    def nvmlDeviceGetHandleByIndex(self, index):  # noqa: N802
        return index

    def nvmlDeviceRegisterEvents(self, handle, kind, events):  # noqa: N802
        pass

    def nvmlEventSetWait(self, events, ms):  # noqa: N802
        if self.events:
            return self.events.pop(0)
        raise self.NVMLError(self.NVML_ERROR_TIMEOUT)

    def nvmlDeviceGetUUID(self, handle):  # noqa: N802
        return f"GPU-{handle}".encode()

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802
        if handle in self.broken:
            raise self.NVMLError(15)
        return SimpleNamespace(total=1 << 34)


def test_xid_marks_unhealthy_and_recovers_after_quiet_time_and_a_good_probe():
    nvml = FakeNvml()
    now = [0.0]
    gpus = [devices.Gpu(0, "GPU-0", 1024), devices.Gpu(1, "GPU-1", 1024)]
    watcher = health.NvmlHealth(nvml, gpus, recovery_s=10, wait_ms=1, clock=lambda: now[0])
    by_uuid = {g.uuid: g.index for g in gpus}
    nvml.events.append(SimpleNamespace(eventData=43, device=1))  # application XID: ignored
    watcher._wait_event("set", by_uuid)
    assert watcher._unhealthy() == frozenset()
    nvml.events.append(SimpleNamespace(eventData=79, device=1))  # fell off the bus
    watcher._wait_event("set", by_uuid)
    assert watcher._unhealthy() == frozenset({1})
    nvml.broken.add(1)
    now[0] = 11.0
    assert watcher._unhealthy() == frozenset({1})  # quiet long enough, but the probe fails
    nvml.broken.clear()
    assert watcher._unhealthy() == frozenset()


def test_watcher_reads_the_file_when_named_and_else_watches_nothing_for_fake_gpus(tmp_path):
    fake = inventory.parse_fake_gpus("0:16")
    assert isinstance(health.watcher(tmp_path / "unhealthy", fake), health.FileHealth)
    assert isinstance(health.watcher(None, fake), health.StaticHealth)


def test_start_runs_the_watcher_in_its_daemon_thread_until_stopped():
    stop = threading.Event()
    thread = health.start(health.StaticHealth(), stop, lambda unhealthy: None)
    assert (thread.name, thread.daemon, thread.is_alive()) == ("gpu-health", True, True)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()


class ShutDownNvml(FakeNvml):
    """NVML shut down by the inventory while the watcher's last wait ran."""

    NVML_ERROR_UNINITIALIZED = 1

    def nvmlEventSetFree(self, events):  # noqa: N802
        raise self.NVMLError(self.NVML_ERROR_UNINITIALIZED)


def test_the_watcher_ends_quietly_when_nvml_was_shut_down_under_it():
    stop = threading.Event()
    stop.set()
    # Raised from the thread, this was a traceback on the console of every stopping node (seen on an H200).
    health.NvmlHealth(ShutDownNvml(), [devices.Gpu(0, "GPU-0", 1024)], wait_ms=1).run(stop, lambda u: None)


def test_join_waits_for_the_watcher_to_end():
    stop = threading.Event()
    ended = threading.Event()

    class Slow:
        def run(self, stop, on_change):
            stop.wait()
            threading.Event().wait(0.2)  # its last NVML wait
            ended.set()

    thread = health.start(Slow(), stop, lambda unhealthy: None)
    stop.set()
    health.join(thread)
    assert ended.is_set()
    health.join(None)  # never started: nothing to wait for
