"""Run the whole DRA driver on this machine's real GPUs (NVML inventory and health) against the API
stand-in and a stand-in of the kubelet's DRA side, and check what a node in mode `dra-mps` would get.

It checks: the ResourceSlice lists one device per GPU with its memory as consumable capacity (whole GiB)
and its UUID, model and compute capability as attributes; the driver registers with the plugin watcher;
a claim allocated 2Gi of GPU 0 prepares into a CDI spec carrying that GPU's real UUID in
NVIDIA_VISIBLE_DEVICES, the share in the gpushare env and the MPS memory limit (the GPUs must be Volta or
newer, else the slice is empty and the script says so); unprepare removes the spec. Prints each step and
exits 1 on the first failed check, 2 when NVML is not usable here.

    .venv/bin/python bench/dra_gpu.py [--fake-gpus 0:16:NVIDIA-A100:8.0 (no GPU: the checks that need none)]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gpucheck
from gpucheck import check

from tests.dra import kubelet
from tests.dra.conftest import claim, result
from webhook.core.node import cdi, devices, draslice, mps
from webhook.core.placement import modes
from webhook.core.wire import resources
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.dra import app
from webhook.dra.settings import DraSettings

NODE = "gpu-node"


def run(args: argparse.Namespace, root: Path) -> str:
    apiserver = ApiServer(bookmark_interval=0.2).start()
    driver = None
    try:
        apiserver.add_node(NODE, labels={modes.MODE_LABEL: "dra-mps"})
        settings = DraSettings(
            node_name=NODE,
            fake_gpus=args.fake_gpus,
            api_host=apiserver.url,
            registry_dir=root / "registry",
            plugins_dir=root / "plugins",
            cdi_dir=root / "cdi",
            mps_pipe_dir="/run/nvidia/mps",
        )
        driver = app.Driver(settings).start()
        gpus = sorted(driver.mode.gpus, key=lambda g: g.index)
        gpucheck.show_gpus(gpus, "the fake inventory" if args.fake_gpus else "NVML")
        name = draslice.slice_name(NODE, settings.driver_name)

        def listed() -> tuple[list[dict[str, Any]]] | None:
            found = apiserver.get("resourceslices", name)  # wrapped: an empty list is an answer too
            return None if found is None else (list(found["spec"]["devices"]),)

        refused = mps.refusal(gpus)
        listed_devices = apiserver.wait_for(listed, timeout=20, what="the ResourceSlice")[0]
        if refused is not None:
            check(listed_devices == [], f"mode dra-mps on GPUs MPS cannot use publishes nothing ({refused})")
            return "OK: the DRA driver refused MPS on these GPUs, as it must"
        print(f"  slice devices: {json.dumps(listed_devices)[:900]}")
        check(
            [d["name"] for d in listed_devices] == [draslice.device_name(g.index) for g in gpus],
            "one device per GPU",
        )
        check(
            [(d["attributes"]["uuid"]["string"], d["capacity"]["memory"]["value"]) for d in listed_devices]
            == [(g.uuid, f"{g.memory_mib // devices.MIB_PER_GIB}Gi") for g in gpus],
            "each with its UUID and its memory in whole GiB as consumable capacity",
        )
        info = kubelet.register(settings.registration_socket)
        check(
            driver.ready(),
            f"registered with the plugin watcher ({info.name}, {list(info.supported_versions)})",
        )
        allocated = result(draslice.device_name(gpus[0].index), "2Gi", share="s1") | {"pool": NODE}
        apiserver.put(claim("u1", "c1", allocated))
        got = kubelet.prepare(info.endpoint, [("u1", "ns", "c1")]).claims["u1"]
        check(got.error == "", f"a claim of 2Gi on GPU {gpus[0].index} prepared ({got.error or 'no error'})")
        spec_path = settings.cdi_dir / cdi.file_name(cdi.kind(settings.driver_name), "u1")
        edits = json.loads(spec_path.read_text())["devices"][0]["containerEdits"]
        print(f"  CDI env: {edits['env']}")
        env = set(edits["env"])
        check(f"NVIDIA_VISIBLE_DEVICES={gpus[0].uuid}" in env, "the spec names the GPU by its real UUID")
        check(
            f"{resources.ENV_MEM_CONTAINER}=2" in env and f"{resources.ENV_MEM_IDX}={gpus[0].index}" in env,
            "and carries the share in the gpushare env",
        )
        check(f"{mps.ENV_MEM_LIMIT}=0=2048MB" in env, "and the MPS memory limit of the share")
        gone = kubelet.unprepare(info.endpoint, [("u1", "ns", "c1")]).claims["u1"]
        check(gone.error == "" and not spec_path.exists(), "unprepare removed the spec")
        return "OK: the DRA driver served this machine's GPUs"
    finally:
        if driver is not None:
            driver.stop()
        apiserver.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    gpucheck.add_fake_gpus(parser, "0:16:NVIDIA-A100:8.0")
    args = parser.parse_args()
    return gpucheck.main("dra_gpu", args, run, fake=bool(args.fake_gpus))


if __name__ == "__main__":
    sys.exit(main())
