"""How a node hands its GPUs out: each strategy against specs that name all, some or none of its GPUs,
the CDI devices of a container's GPUs, the refusal of a GPU no spec names, and the env that goes with it."""

from __future__ import annotations

import pytest

from webhook.core.node import cdidevices, devicelist, devices
from webhook.core.node.devicelist import Strategy
from webhook.core.wire import resources

GPUS = (
    devices.Gpu(0, "GPU-aaaa", 16384),
    devices.Gpu(1, "GPU-bbbb", 16384),
    devices.Gpu(2, "GPU-cccc", 16384),
)
FOLDERS = ("/etc/cdi", "/var/run/cdi")


def _catalog(*names: str) -> cdidevices.Catalog:
    return cdidevices.Catalog("nvidia.com/gpu", frozenset(names), FOLDERS)


ALL = _catalog("0", "1", "2", "GPU-aaaa", "GPU-bbbb", "GPU-cccc", "all")
NONE = _catalog()
SOME = _catalog("GPU-aaaa", "1")
ENV = {resources.ENV_VISIBLE_DEVICES: "GPU-aaaa", resources.ENV_MEM_IDX: "0", resources.ENV_MEM_POD: "4"}


@pytest.mark.parametrize(
    ("strategy", "catalog", "mode", "visible", "cdi"),
    [
        (Strategy.AUTO, ALL, "cdi-cri", "nvidia.com/gpu=GPU-aaaa", ("nvidia.com/gpu=GPU-aaaa",)),
        (Strategy.AUTO, SOME, "cdi-cri", "nvidia.com/gpu=GPU-aaaa", ("nvidia.com/gpu=GPU-aaaa",)),
        (Strategy.AUTO, NONE, "envvar", "GPU-aaaa", ()),
        (Strategy.ENVVAR, ALL, "envvar", "GPU-aaaa", ()),
        (Strategy.BOTH, ALL, "both", "GPU-aaaa", ("nvidia.com/gpu=GPU-aaaa",)),
    ],
    ids=["auto-all", "auto-some", "auto-none", "envvar", "both"],
)
def test_each_strategy_hands_out_env_cdi_or_both(
    strategy: Strategy, catalog: cdidevices.Catalog, mode: str, visible: str, cdi: tuple[str, ...]
) -> None:
    found = devicelist.decide(strategy, GPUS, catalog)
    env, devices_ = found.hand_out(ENV, [0])
    assert (found.mode, env[resources.ENV_VISIBLE_DEVICES], devices_) == (mode, visible, cdi)
    assert (env[resources.ENV_MEM_IDX], env[resources.ENV_MEM_POD]) == ("0", "4")  # the gpushare env stays


def test_with_cdi_alone_the_visible_devices_env_names_the_same_devices_fully_qualified() -> None:
    # An NVIDIA runtime reading the env resolves these through CDI; bare UUIDs it would take for its
    # default kind's, and no value would let an image's NVIDIA_VISIBLE_DEVICES=all through.
    env, found = devicelist.decide(Strategy.CDI_CRI, GPUS, ALL).hand_out(ENV, [2, 1])
    assert env[resources.ENV_VISIBLE_DEVICES] == "nvidia.com/gpu=GPU-bbbb,nvidia.com/gpu=GPU-cccc"
    assert found == ("nvidia.com/gpu=GPU-bbbb", "nvidia.com/gpu=GPU-cccc")


def test_a_container_gets_the_cdi_device_of_each_of_its_gpus_by_uuid() -> None:
    found = devicelist.decide(Strategy.AUTO, GPUS, ALL)
    assert found.cdi_devices([2, 0]) == ("nvidia.com/gpu=GPU-aaaa", "nvidia.com/gpu=GPU-cccc")
    assert found.cdi_devices([1, 1]) == ("nvidia.com/gpu=GPU-bbbb",)


def test_a_spec_naming_gpus_by_index_only_is_used_by_index() -> None:
    found = devicelist.decide(Strategy.AUTO, GPUS, _catalog("0", "1", "2"))
    assert found.cdi_devices([0, 1]) == ("nvidia.com/gpu=0", "nvidia.com/gpu=1")


def test_the_env_strategy_gives_no_cdi_device_even_when_a_spec_names_the_gpu() -> None:
    assert devicelist.decide(Strategy.ENVVAR, GPUS, ALL).cdi_devices([0]) == ()
    assert devicelist.env_only().cdi_devices([0]) == ()


def test_a_gpu_no_spec_names_is_refused_naming_the_gpu_the_kind_and_the_folders() -> None:
    found = devicelist.decide(Strategy.AUTO, GPUS, SOME)
    assert found.cdi_devices([0, 1]) == ("nvidia.com/gpu=GPU-aaaa", "nvidia.com/gpu=1")
    with pytest.raises(devicelist.UnnamedGpu) as caught:
        found.cdi_devices([1, 2])
    assert str(caught.value) == (
        "GPU 2 (GPU-cccc) is not a CDI device of kind nvidia.com/gpu in the specs read from /etc/cdi, "
        "/var/run/cdi (device-list strategy auto): without it the container would start without its GPU. "
        "Write the node's CDI spec (the NVIDIA Container Toolkit's `nvidia-ctk cdi generate "
        "--output=/var/run/cdi/nvidia.yaml`), or, on a node whose runtime is the NVIDIA runtime, hand GPUs "
        "out as env (chart value cdi.deviceListStrategy=envvar)"
    )
    with pytest.raises(devicelist.UnnamedGpu):
        found.hand_out(ENV, [2])


def test_forced_cdi_without_any_spec_refuses_every_gpu() -> None:
    found = devicelist.decide(Strategy.CDI_CRI, GPUS, NONE)
    with pytest.raises(
        devicelist.UnnamedGpu, match=r"^GPU 0 \(GPU-aaaa\), GPU 1 \(GPU-bbbb\) are not CDI dev"
    ):
        found.cdi_devices([0, 1])


def test_the_log_line_says_what_was_chosen_and_why() -> None:
    assert devicelist.decide(Strategy.AUTO, GPUS, NONE).describe() == (
        "GPUs handed to containers as NVIDIA_VISIBLE_DEVICES (device-list envvar): no CDI spec in /etc/cdi, "
        "/var/run/cdi names a GPU of this node as nvidia.com/gpu"
    )
    assert devicelist.decide(Strategy.ENVVAR, GPUS, ALL).describe().endswith("set by --device-list-strategy")
    assert devicelist.decide(Strategy.AUTO, GPUS, SOME).describe() == (
        "GPUs handed to containers as CDI devices nvidia.com/gpu (device-list cdi-cri, configured auto): the "
        "specs in /etc/cdi, /var/run/cdi name 2 of 3 GPUs; not named: GPU 2 (GPU-cccc)"
    )
