"""kube-controller-manager for a local control plane: the controllers that turn objects into other objects
(a namespace's `default` ServiceAccount, a Deployment's pods, a pod's ResourceClaims from its templates),
started as kubeadm starts it, minus the two controllers that only make sense beside kubelets.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from webhook.devcluster import pki as pkimod
from webhook.devcluster.process import http_status

NAME = "kube-controller-manager"
# Every on-by-default controller (the names are those of k8s.io/kubernetes/cmd/kube-controller-manager/
# names), save two that act on Nodes as if kubelets ran on them, where most of ours are bare Node objects:
# - node-lifecycle-controller marks a Node whose kubelet stops posting status (ours never post) Unknown
#   after 50 s and taints it node.kubernetes.io/unreachable (NoSchedule and NoExecute): nothing could be
#   scheduled there any more, and the taint-eviction controller would evict every pod bound to it.
# - ttl-controller annotates every Node (node.alpha.kubernetes.io/ttl, the kubelet's ConfigMap cache TTL
#   in big clusters): a write to Nodes that the tests write themselves (GET then PUT status), so they
#   would meet conflicts no real kubelet-less cluster has.
# The rest stays on, the garbage collector, the namespace, pod GC and taint-eviction controllers included.
# The CSR signer has no signing files, so it does not start: every certificate here is issued by pki.py.
# A cluster whose every Node has a kubelet (tests/cluster_ha) runs the node lifecycle controller as
# kubeadm does: `node_lifecycle=True`.
CONTROLLERS = ("*", "-node-lifecycle-controller", "-ttl-controller")
WITH_NODE_LIFECYCLE = ("*", "-ttl-controller")
# The identity the default RBAC (ClusterRole and ClusterRoleBinding system:kube-controller-manager) knows.
USER = "system:kube-controller-manager"


def argv(
    bins: Path, pki: pkimod.Pki, kubeconfig: Path, port: int, workdir: Path, *, node_lifecycle: bool = False
) -> list[str]:
    """Its command line with `kubeconfig` (a client certificate of USER), serving on 127.0.0.1:`port`
    with a certificate of the cluster CA (written now); what it writes on disk goes under `workdir`."""
    cert, key = pkimod.serving(pki, NAME, ("localhost",), ("127.0.0.1",))
    return [
        str(bins / NAME),
        f"--kubeconfig={kubeconfig}",
        # No --authentication-kubeconfig: without it only the always-allowed paths answer (/healthz,
        # /readyz, /livez), which is all we read.
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={cert}",
        f"--tls-private-key-file={key}",
        # Each controller acts with its own ServiceAccount token (kube-system/<controller>), under
        # the system:controller:* roles, as in kubeadm's clusters; without it every controller would
        # act with USER's far wider rights, and RBAC gaps a real cluster has would go unseen.
        "--use-service-account-credentials=true",
        # Signs the legacy token Secrets (serviceaccount-token-controller does not start without it);
        # the same key the API server verifies with (--service-account-key-file).
        f"--service-account-private-key-file={pki.sa_key}",
        # Published into every namespace as the kube-root-ca.crt ConfigMap, which a kubelet needs to
        # mount a pod's service-account token volume.
        f"--root-ca-file={pki.ca_crt}",
        # One instance: no Lease to win first, no renewals to write.
        "--leader-elect=false",
        # The attach-detach controller creates this folder, by default /usr/libexec/kubernetes/...
        f"--flex-volume-plugin-dir={workdir / 'flexvolume'}",
        f"--controllers={','.join(WITH_NODE_LIFECYCLE if node_lifecycle else CONTROLLERS)}",
        "--profiling=false",
        "--v=1",
    ]


def healthy(pki: pkimod.Pki, port: int) -> bool:
    """Its /healthz answers ok (OSError while nothing listens)."""
    context = ssl.create_default_context(cafile=str(pki.ca_crt))
    return http_status(f"https://127.0.0.1:{port}/healthz", context) == 200
