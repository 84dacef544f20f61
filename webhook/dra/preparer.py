"""NodePrepareResources and NodeUnprepareResources for one claim, whatever the gRPC version.

Prepare reads the claim from the API (the kubelet sends only its identity), turns its allocation into one CDI
device per request (core.node.drashares, core.node.cdi), writes the spec file, then the checkpoint, and
answers one device per allocation result: the request's CDI ID on its first device (the kubelet gives a
container the IDs of every device of the requests it names, and one ID must not come twice). Both calls are
idempotent: a claim in the checkpoint gets the same answer (its spec rewritten if it was lost), one not in it
unprepares as done. Calls for one claim take turns; calls for different claims run at once.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from webhook.core.node import cdi, devicelist, devices, drashares, mps
from webhook.dra import checkpoint
from webhook.dra.cdispecs import SpecFiles
from webhook.kube import errors

log = logging.getLogger(__name__)

_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")
_MAX_UID = 128


class PrepareError(Exception):
    """This claim cannot be prepared or unprepared; the message goes to the kubelet (and the pod's events)."""


class ClaimReader(Protocol):
    def get(self, namespace: str, name: str) -> dict[str, Any]:
        """The ResourceClaim as the API has it; errors.ApiError when it cannot be read."""
        ...


class KeyedLock:
    """One lock per key, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def held(self, key: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)


def _no_mps() -> mps.MpsDirs | None:
    return None


@dataclass(eq=False)
class Preparer:
    driver: str
    node: str
    gpus: Sequence[devices.Gpu]
    granularity: devices.Granularity
    claims: ClaimReader
    store: checkpoint.Checkpoint  # the prepared claims
    specs: SpecFiles
    # Read per prepare: the node's mode label may change at any time.
    mps_dirs: Callable[[], mps.MpsDirs | None] = _no_mps
    # Read per prepare: whether GPUs reach containers as the toolkit's CDI devices (docs/cdi.md).
    delivery: Callable[[], devicelist.Delivery] = devicelist.env_only
    _locks: KeyedLock = field(default_factory=KeyedLock, init=False)

    @property
    def kind(self) -> str:
        return cdi.kind(self.driver)

    def prepare(self, uid: str, namespace: str, name: str) -> tuple[checkpoint.Device, ...]:
        _check_identity(uid, namespace, name)
        with self._locks.held(uid):
            done = self.store.get(uid)
            if done is not None:
                self._restore(done)
                return done.devices
            claim = self._read(namespace, name)
            try:
                shares = drashares.read(
                    claim,
                    uid,
                    driver=self.driver,
                    pool=self.node,
                    gpus=self.gpus,
                    granularity=self.granularity,
                )
            except drashares.ClaimError as err:
                raise PrepareError(str(err)) from None
            if not shares.shares:
                return ()  # nothing of ours in it: nothing to write
            prepared = self._prepared(uid, shares)
            self._write(prepared)
            log.info(
                "prepared ResourceClaim %s/%s: %s",
                namespace,
                name,
                ", ".join(f"{s.device} {self.granularity.describe(s.units)}" for s in shares.shares),
            )
            return prepared.devices

    def unprepare(self, uid: str, namespace: str, name: str) -> None:
        _check_identity(uid, namespace, name)
        with self._locks.held(uid):
            done = self.store.get(uid)
            # The spec file of this UID even when the checkpoint never got it (a crash in between).
            spec_file = done.spec_file if done is not None else cdi.file_name(self.kind, uid)
            try:
                self.specs.remove(spec_file)
                self.store.remove(uid)
            except (OSError, checkpoint.CheckpointError) as err:
                raise PrepareError(f"unpreparing ResourceClaim {namespace}/{name}: {err}") from None
            if done is not None:
                log.info("unprepared ResourceClaim %s/%s", namespace, name)

    def _read(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return self.claims.get(namespace, name)
        except errors.NotFoundError:
            raise PrepareError(f"ResourceClaim {namespace}/{name} not found") from None
        except errors.ApiError as err:
            raise PrepareError(f"reading ResourceClaim {namespace}/{name}: {err}") from None

    def _prepared(self, uid: str, shares: drashares.ClaimShares) -> checkpoint.Prepared:
        kind = self.kind
        delivery = self.delivery()
        try:
            edits = drashares.edits(shares, self.gpus, self.granularity, self.mps_dirs(), delivery)
            names = {request: cdi.device_name(uid, request) for request in edits}
            spec = cdi.spec(kind, {names[request]: found for request, found in edits.items()})
            toolkit = drashares.gpu_devices(shares, delivery)
        except (cdi.CdiError, devicelist.UnnamedGpu) as err:
            raise PrepareError(f"ResourceClaim {shares.namespace}/{shares.name}: {err}") from None
        given: set[str] = set()
        answer = []
        for share, gpu_ids in zip(shares.shares, toolkit, strict=True):
            first = share.request not in given
            given.add(share.request)
            ids = ((cdi.device_id(kind, names[share.request]),) if first else ()) + gpu_ids
            answer.append(checkpoint.Device((share.request,), self.node, share.device, ids, share.share_id))
        return checkpoint.Prepared(
            uid, shares.namespace, shares.name, tuple(answer), cdi.file_name(kind, uid), spec
        )

    def _write(self, prepared: checkpoint.Prepared) -> None:
        """Spec first, then the checkpoint: a crash between leaves a spec that the next start removes."""
        where = f"ResourceClaim {prepared.namespace}/{prepared.name}"
        try:
            self.specs.write(prepared.spec_file, prepared.spec)
        except OSError as err:
            raise PrepareError(f"{where}: writing its CDI spec failed: {err}") from None
        try:
            self.store.put(prepared)
        except checkpoint.CheckpointError as err:
            self.specs.remove(prepared.spec_file)
            raise PrepareError(f"{where}: {err}") from None

    def _restore(self, done: checkpoint.Prepared) -> None:
        """A claim prepared before: put its spec back should it be gone (the CDI folder is often a tmpfs)."""
        try:
            if not self.specs.exists(done.spec_file):
                self.specs.write(done.spec_file, done.spec)
                log.info("rewrote the CDI spec of ResourceClaim %s/%s", done.namespace, done.name)
        except OSError as err:
            raise PrepareError(
                f"ResourceClaim {done.namespace}/{done.name}: rewriting its CDI spec: {err}"
            ) from None


def _check_identity(uid: str, namespace: str, name: str) -> None:
    if not (uid and namespace and name):
        raise PrepareError(
            f"the claim needs a uid, namespace and name (got uid={uid!r}, namespace={namespace!r}, "
            f"name={name!r})"
        )
    # The UID names the claim's CDI spec file and devices: letters, digits and '-' as in a UUID, nothing
    # that could leave the CDI folder.
    if len(uid) > _MAX_UID or not _UID.fullmatch(uid):
        raise PrepareError(f"claim {namespace}/{name}: UID {uid[:_MAX_UID]!r} is not a Kubernetes UID")
