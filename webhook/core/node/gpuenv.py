"""The gpushare env of a container holding GPU memory: what the original tools read (`ALIYUN_COM_GPU_MEM_*`)
and the NVIDIA runtime acts on (`NVIDIA_VISIBLE_DEVICES`). One place for the device plugin's Allocate
(core.node.matching) and the DRA driver's CDI specs (core.node.drashares).

    container_env([gpu1], {1: 4}, pod_total=4, granularity=GiB)
    -> {"NVIDIA_VISIBLE_DEVICES": "GPU-...", "ALIYUN_COM_GPU_MEM_IDX": "1", "ALIYUN_COM_GPU_MEM_POD": "4",
        "ALIYUN_COM_GPU_MEM_CONTAINER": "4", "ALIYUN_COM_GPU_MEM_DEV": "16"}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from webhook.core.node import devices
from webhook.core.wire import resources


def container_env(
    gpus: Sequence[devices.Gpu],
    held: Mapping[int, int],
    pod_total: int,
    granularity: devices.Granularity,
    isolation_disabled: bool = False,
) -> dict[str, str]:
    """The env of a container holding `held` ({GPU index: units}) on `gpus` (every index of `held`
    among them), in a pod holding `pod_total` units."""
    by_index = {g.index: g for g in gpus}
    chosen = sorted(held)
    env = {
        resources.ENV_VISIBLE_DEVICES: ",".join(by_index[g].uuid for g in chosen),
        resources.ENV_MEM_IDX: ",".join(str(g) for g in chosen),
        resources.ENV_MEM_POD: str(pod_total),
        # The memory it may use on each of its GPUs: on one GPU its whole share; split unevenly over
        # several (a pod of M GPUs fills them in container order), the least it holds on any, so a limit
        # applied per GPU never takes memory another pod holds.
        resources.ENV_MEM_CONTAINER: str(min(held.values())),
        resources.ENV_MEM_DEV: str(granularity.units(by_index[chosen[0]].memory_mib)),
    }
    if isolation_disabled:
        env[resources.CGPU_DISABLE_ENV] = "true"
    return env
