"""What both node agents (the device plugin, the DRA driver) stand on: settings, GPUs and API at start,
probes, metrics, the Node's labels, sockets and locks, start and stop. May import kube, serving, gpus,
core; never a shell."""
