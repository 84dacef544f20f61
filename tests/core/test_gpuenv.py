"""The gpushare env of a container: one GPU, several GPUs split unevenly, and the cGPU switch."""

from __future__ import annotations

from webhook.core.node import devices, gpuenv
from webhook.core.wire import resources

GPUS = (devices.Gpu(0, "GPU-a", 16384), devices.Gpu(1, "GPU-b", 16130))
GIB = devices.Granularity()


def test_one_gpu_gives_its_uuid_index_and_the_memory_in_units():
    env = gpuenv.container_env(GPUS, {1: 4}, 6, GIB)
    assert env == {
        resources.ENV_VISIBLE_DEVICES: "GPU-b",
        resources.ENV_MEM_IDX: "1",
        resources.ENV_MEM_POD: "6",
        resources.ENV_MEM_CONTAINER: "4",
        resources.ENV_MEM_DEV: "15",  # 16130 MiB: 15 whole GiB
    }


def test_several_gpus_are_listed_in_index_order_and_the_container_gets_the_least_it_holds_on_any():
    env = gpuenv.container_env(GPUS, {1: 3, 0: 5}, 8, GIB, isolation_disabled=True)
    assert env[resources.ENV_VISIBLE_DEVICES] == "GPU-a,GPU-b"
    assert env[resources.ENV_MEM_IDX] == "0,1"
    assert env[resources.ENV_MEM_CONTAINER] == "3"
    assert env[resources.ENV_MEM_DEV] == "16"
    assert env[resources.CGPU_DISABLE_ENV] == "true"
