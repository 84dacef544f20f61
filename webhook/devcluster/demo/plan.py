"""What `gpushare demo` shows, whichever cluster runs it: the nodes' GPUs, the pods it creates and the one
the webhook refuses."""

from __future__ import annotations

from webhook.core.wire import resources

NAMESPACE = "demo"
# (node, fake GPUs as the node agents' --fake-gpus takes them: index:GiB)
NODES: tuple[tuple[str, str], ...] = (("gpu-node-1", "0:16,1:16"), ("gpu-node-2", "0:24"))
# The same GPUs on the one node that runs containers (the chart gives every node agent the same GPUs).
ONE_NODE: tuple[tuple[str, str], ...] = (("gpu-node", "0:16,1:16,2:24"),)
# (pod, GiB of aliyun.com/gpu-mem): each fits whatever GPUs the others took, in any order.
PODS = (("train-a", 12), ("train-b", 10), ("infer", 8), ("notebook", 4))
REFUSED = ("half-gpu", resources.NVIDIA_GPU, "0.5")
NODE_LABELS = {"gpushare": "true", resources.ISOLATION_KEY: "false"}
