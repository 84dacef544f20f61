"""`gpushare dra-driver`: flags and NODE_NAME -> DraSettings -> `webhook.dra.app.run`.

A bad flag exits 2 with the reason; a failure at start (inventory, checkpoint, API, socket) exits 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from webhook.cli import helpformat
from webhook.core import draslice, mps
from webhook.dra import app
from webhook.dra import settings as dra_settings


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpushare dra-driver",
        formatter_class=helpformat.DefaultsFormatter,
        description="Serve the kubelet DRA driver that publishes this node's GPUs for GPU-memory shares "
        "allocated by kube-scheduler (node name from NODE_NAME).",
    )
    p.add_argument(
        "--driver-name",
        default=draslice.DEFAULT_DRIVER,
        help=f"the DRA driver name in ResourceSlices and DeviceClasses (default {draslice.DEFAULT_DRIVER})",
    )
    p.add_argument(
        "--memory-unit",
        choices=("GiB", "MiB"),
        default="GiB",
        help="step of the memory capacity a claim is rounded up to (default GiB)",
    )
    p.add_argument(
        "--mib-per-device",
        type=int,
        metavar="N",
        help="MiB mode: the step in MiB (default 1), so claims are rounded up to N MiB",
    )
    p.add_argument(
        "--fake-gpus", default="", metavar="SPEC", help='declare GPUs instead of NVML, e.g. "0:16,1:16" (GiB)'
    )
    p.add_argument("--inventory-file", type=Path, help="declare GPUs from a YAML/JSON file instead of NVML")
    p.add_argument(
        "--health-file",
        type=Path,
        help='fake inventories: file of unhealthy GPU indexes, e.g. "0,2"; they leave the ResourceSlice',
    )
    p.add_argument(
        "--health-recovery",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="NVML: a GPU is healthy again after this long without critical XIDs and a passing probe "
        "(default 60)",
    )
    p.add_argument(
        "--registry-dir",
        type=Path,
        default=dra_settings.DEFAULT_REGISTRY_DIR,
        help="the kubelet's plugin registration folder, where the registration socket goes "
        f"(default {dra_settings.DEFAULT_REGISTRY_DIR})",
    )
    p.add_argument(
        "--plugins-dir",
        type=Path,
        default=dra_settings.DEFAULT_PLUGINS_DIR,
        help="the kubelet's plugins folder; the driver keeps its socket and checkpoint in <it>/<driver name> "
        f"(default {dra_settings.DEFAULT_PLUGINS_DIR})",
    )
    p.add_argument(
        "--cdi-dir",
        type=Path,
        default=dra_settings.DEFAULT_CDI_DIR,
        help=f"where the container runtime reads CDI specs (default {dra_settings.DEFAULT_CDI_DIR})",
    )
    p.add_argument("--kubeconfig", default="", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    p.add_argument(
        "--api-host", default="", help="API server URL without auth, e.g. http://127.0.0.1:8080 (local runs)"
    )
    p.add_argument(
        "--health-port", type=int, default=0, help="serve /healthz and /metrics on this port (0: off)"
    )
    p.add_argument(
        "--api-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="exit 1 when the node cannot be read from the API server this long at start (default 30)",
    )
    p.add_argument(
        "--resync-period",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="check the published ResourceSlice this often, besides its watch (default 60)",
    )
    p.add_argument(
        "--mps",
        action="store_true",
        help="give every prepared claim the NVIDIA MPS env and mounts on nodes labelled dra too, not only on "
        "dra-mps (needs Volta or newer GPUs)",
    )
    p.add_argument(
        "--mps-pipe-dir",
        default=mps.DEFAULT_PIPE_DIRECTORY,
        metavar="DIR",
        help=f"the MPS pipe directory on the node (default {mps.DEFAULT_PIPE_DIRECTORY})",
    )
    p.add_argument(
        "--mps-log-dir",
        default=mps.DEFAULT_LOG_DIRECTORY,
        metavar="DIR",
        help=f"the MPS log directory on the node (default {mps.DEFAULT_LOG_DIRECTORY})",
    )
    p.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default="info", help="log level"
    )
    p.add_argument("--log-format", choices=("json", "text"), default="json", help="log format")
    return p


def settings_from_args(args: argparse.Namespace, environ: dict[str, str]) -> dra_settings.DraSettings:
    return dra_settings.DraSettings(
        node_name=environ.get("NODE_NAME", ""),
        driver_name=args.driver_name,
        memory_unit=args.memory_unit,
        mib_per_device=args.mib_per_device,
        fake_gpus=args.fake_gpus,
        inventory_file=args.inventory_file,
        health_file=args.health_file,
        health_recovery_s=args.health_recovery,
        registry_dir=args.registry_dir,
        plugins_dir=args.plugins_dir,
        cdi_dir=args.cdi_dir,
        kubeconfig=args.kubeconfig,
        api_host=args.api_host,
        health_port=args.health_port,
        api_timeout_s=args.api_timeout,
        resync_s=args.resync_period,
        force_mps=args.mps,
        mps_pipe_dir=args.mps_pipe_dir,
        mps_log_dir=args.mps_log_dir,
        log_level=args.log_level,
        log_format=args.log_format,
    ).validate()


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = settings_from_args(args, dict(os.environ))
    except dra_settings.SettingsError as err:
        print(f"gpushare dra-driver: {err}", file=sys.stderr)
        return 2
    try:
        return app.run(settings)
    except app.StartError as err:
        print(f"gpushare dra-driver: {err}", file=sys.stderr)
        return 1
