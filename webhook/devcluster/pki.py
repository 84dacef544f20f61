"""The certificates and keys of a local control plane, written as files the binaries take as flags.

One CA signs the API server's serving certificate, the admin client certificate (O=system:masters) and
the webhook's serving certificate; the service-account tokens are signed with their own RSA key, as in
kubeadm's layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from webhook.core.pki import certificates

# The names a client may dial the API server by; 10.0.0.1 is the `kubernetes` Service's IP in the
# service range the API server is started with.
API_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
API_IPS = ("127.0.0.1", "10.0.0.1")


@dataclass(frozen=True, slots=True)
class Pki:
    """Paths of the PEM files in `root`."""

    root: Path

    @property
    def ca_crt(self) -> Path:
        return self.root / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    def crt(self, name: str) -> Path:
        return self.root / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.root / f"{name}.key"

    @property
    def sa_key(self) -> Path:
        return self.root / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.root / "sa.pub"

    def ca(self) -> certificates.KeyPair:
        return certificates.KeyPair(self.ca_crt.read_bytes(), self.ca_key.read_bytes())


def create(root: Path, api_ips: tuple[str, ...] = API_IPS) -> Pki:
    """CA, API server serving pair (for `api_ips` and API_DNS_NAMES), admin client pair and
    service-account key pair under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    pki = Pki(root)
    now = datetime.now(UTC)
    ca = certificates.generate_ca("gpushare-devcluster-ca", now)
    _write(pki.ca_crt, ca.cert_pem)
    _write(pki.ca_key, ca.key_pem)
    serving(pki, "apiserver", API_DNS_NAMES, api_ips)
    # The front proxy's own CA and client pair, as kubeadm makes them: the API server publishes that CA
    # (extension-apiserver-authentication), which components reading their callers' identity from it
    # (the chart's kube-scheduler) expect to find.
    front = certificates.generate_ca("gpushare-devcluster-front-proxy-ca", now)
    _write(pki.crt("front-proxy-ca"), front.cert_pem)
    _write(pki.key("front-proxy-ca"), front.key_pem)
    proxy = certificates.generate_client(front, "front-proxy-client", [], now)
    _write(pki.crt("front-proxy-client"), proxy.cert_pem)
    _write(pki.key("front-proxy-client"), proxy.key_pem)
    admin = certificates.generate_client(ca, "gpushare-admin", ["system:masters"], now)
    _write(pki.crt("admin"), admin.cert_pem)
    _write(pki.key("admin"), admin.key_pem)
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(
        pki.sa_key,
        sa.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    _write(
        pki.sa_pub,
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    return pki


def serving(pki: Pki, name: str, dns_names: tuple[str, ...], ips: tuple[str, ...]) -> tuple[Path, Path]:
    """A serving pair `name.crt`/`name.key` signed by the cluster CA; returns their paths."""
    pair = certificates.generate_serving(pki.ca(), dns_names, ips, datetime.now(UTC))
    _write(pki.crt(name), pair.cert_pem)
    _write(pki.key(name), pair.key_pem)
    return pki.crt(name), pki.key(name)


def client(pki: Pki, name: str, common_name: str, groups: list[str]) -> tuple[Path, Path]:
    """A client pair `name.crt`/`name.key` for user `common_name` in `groups`; returns their paths."""
    pair = certificates.generate_client(pki.ca(), common_name, groups, datetime.now(UTC))
    _write(pki.crt(name), pair.cert_pem)
    _write(pki.key(name), pair.key_pem)
    return pki.crt(name), pki.key(name)


def _write(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)
