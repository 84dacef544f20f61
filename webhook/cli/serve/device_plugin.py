"""`gpushare device-plugin`: flags and NODE_NAME -> DevicePluginSettings -> `webhook.deviceplugin.app.run`.

A bad flag exits 2 with the reason; a failure at start (inventory, API, socket) exits 1.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from webhook.cli import helpformat, progname
from webhook.cli.serve import nodeagent
from webhook.core.node import devices
from webhook.core.wire import resources
from webhook.deviceplugin import app
from webhook.deviceplugin import settings as dp_settings


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=progname.command("device-plugin"),
        formatter_class=helpformat.DefaultsFormatter,
        description="Serve the kubelet device plugin for aliyun.com/gpu-mem on this node "
        "(node name from NODE_NAME).",
    )
    p.add_argument(
        "--memory-unit", choices=("GiB", "MiB"), default="GiB", help="unit of one fake device (default GiB)"
    )
    p.add_argument(
        "--mib-per-device",
        type=int,
        metavar="N",
        help="MiB mode: MiB per fake device, so the unit is N MiB "
        f"(default {devices.DEFAULT_MIB_PER_DEVICE}; 1 = the original one device per MiB)",
    )
    nodeagent.add_gpu_flags(
        p,
        fake_gpus_help='declare GPUs instead of NVML, e.g. "0:16,1:16,2:24" (GiB)',
        health_file_help='fake inventories: file of unhealthy GPU indexes, e.g. "0,2", re-read every 0.5 s',
    )
    p.add_argument(
        "--device-plugin-dir",
        type=Path,
        default=dp_settings.DEFAULT_PLUGIN_DIR,
        help=f"kubelet device-plugin directory (default {dp_settings.DEFAULT_PLUGIN_DIR})",
    )
    p.add_argument(
        "--endpoint", default=dp_settings.DEFAULT_ENDPOINT, help="our socket file name in that directory"
    )
    p.add_argument(
        "--whole-card-resource",
        default=resources.NVIDIA_GPU,
        metavar="NAME",
        help="resource of whole GPUs served beside gpu-mem on sharing nodes, on its own socket "
        f"(<endpoint>-wholecard.sock; default {resources.NVIDIA_GPU}); the extender's flag of that name too",
    )
    nodeagent.add_api_flags(p)
    p.add_argument(
        "--allocate-wait",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="how long Allocate waits for the pod watch to show the pod being admitted (default 3)",
    )
    p.add_argument(
        "--pod-resources-socket",
        default=str(dp_settings.DEFAULT_POD_RESOURCES),
        metavar="PATH",
        help="the kubelet PodResources API socket, to check which pod got which devices "
        f'(default {dp_settings.DEFAULT_POD_RESOURCES}; "" turns it off)',
    )
    p.add_argument(
        "--reconcile-period",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="reconcile annotations with the PodResources API this often, and after Allocates (default 30)",
    )
    p.add_argument(
        "--api-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="exit 1 when the API server cannot be reached this long at start (default 30)",
    )
    nodeagent.add_mps_flags(
        p,
        mps_help="give every gpu-mem container the NVIDIA MPS env and mounts on any sharing node, not only "
        "on nodes labelled ack.node.gpu.schedule=mps (needs Volta or newer GPUs)",
        dirs_note=", mounted into MPS containers",
    )
    nodeagent.add_delivery_flags(p)
    usage = p.add_argument_group("GPU usage and over-share (docs/device-plugin.md)")
    usage.add_argument(
        "--usage-interval",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="sample each GPU's processes and match them to pods this often; 0 turns usage off (default 10)",
    )
    usage.add_argument(
        "--proc-root",
        type=Path,
        default=dp_settings.DEFAULT_PROC_ROOT,
        metavar="DIR",
        help="the host's /proc, to read the cgroup of each GPU process (NVML reports host PIDs; the chart "
        "mounts it at /host/proc)",
    )
    usage.add_argument(
        "--fake-processes",
        type=Path,
        metavar="FILE",
        help="with --fake-gpus or --inventory-file: GPU processes from a YAML/JSON file, re-read every poll, "
        "e.g. 'processes: [{gpu: 0, pid: 4242, memory: 5GiB, utilization: 0.4}]'",
    )
    usage.add_argument(
        "--overshare-grace",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a container above its share this long is over-share: metric, Event, log (default 60)",
    )
    usage.add_argument(
        "--overshare-event-interval",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="at most one over-share Event per container this often (default 600)",
    )
    usage.add_argument(
        "--overshare-evict",
        action="store_true",
        help="evict pods over their share (Eviction API) on nodes labelled ack.node.gpu.schedule=share; "
        "never on cgpu or mps nodes (off by default)",
    )
    nodeagent.add_log_flags(p)
    return p


def settings_from_args(args: argparse.Namespace, environ: dict[str, str]) -> dp_settings.DevicePluginSettings:
    return dp_settings.DevicePluginSettings(
        **nodeagent.agent_settings(args, environ),
        device_plugin_dir=args.device_plugin_dir,
        endpoint=args.endpoint,
        whole_card_resource=args.whole_card_resource,
        allocate_wait_s=args.allocate_wait,
        pod_resources_socket=Path(args.pod_resources_socket) if args.pod_resources_socket else None,
        reconcile_s=args.reconcile_period,
        usage_interval_s=args.usage_interval,
        proc_root=args.proc_root,
        fake_processes=args.fake_processes,
        overshare_grace_s=args.overshare_grace,
        overshare_event_interval_s=args.overshare_event_interval,
        overshare_evict=args.overshare_evict,
    ).validate()


def main(argv: list[str]) -> int:
    return nodeagent.main(build_parser(), argv, settings_from_args=settings_from_args, run=app.run)
