"""`gpushare dra-driver`: flags and NODE_NAME -> DraSettings -> `webhook.dra.app.run`.

A bad flag exits 2 with the reason; a failure at start (inventory, checkpoint, API, socket) exits 1.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from webhook.cli import helpformat, progname
from webhook.cli.serve import nodeagent
from webhook.core.node import draslice
from webhook.dra import app
from webhook.dra import settings as dra_settings


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=progname.command("dra-driver"),
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
    nodeagent.add_gpu_flags(
        p,
        fake_gpus_help='declare GPUs instead of NVML, e.g. "0:16,1:16" (GiB)',
        health_file_help='fake inventories: file of unhealthy GPU indexes, e.g. "0,2"; they leave the '
        "ResourceSlice",
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
    nodeagent.add_api_flags(p)
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
    nodeagent.add_mps_flags(
        p,
        mps_help="give every prepared claim the NVIDIA MPS env and mounts on nodes labelled dra too, not "
        "only on dra-mps (needs Volta or newer GPUs)",
    )
    nodeagent.add_delivery_flags(p)
    nodeagent.add_log_flags(p)
    return p


def settings_from_args(args: argparse.Namespace, environ: dict[str, str]) -> dra_settings.DraSettings:
    return dra_settings.DraSettings(
        **nodeagent.agent_settings(args, environ),
        driver_name=args.driver_name,
        registry_dir=args.registry_dir,
        plugins_dir=args.plugins_dir,
        cdi_dir=args.cdi_dir,
        resync_s=args.resync_period,
    ).validate()


def main(argv: list[str]) -> int:
    return nodeagent.main(build_parser(), argv, settings_from_args=settings_from_args, run=app.run)
