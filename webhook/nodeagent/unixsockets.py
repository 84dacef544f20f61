"""The node agents' unix sockets: a gRPC server on one (a stale file from an earlier run replaced), its
stop, and the lock file that keeps a second instance from deleting the first one's sockets."""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc

from webhook.serving import socketfiles

MAX_SOCKET_PATH = 107  # sizeof(sockaddr_un.sun_path) on Linux, less the terminating NUL


class AlreadyRunning(Exception):
    """Another instance serves these sockets (it holds the lock file beside them)."""


class SocketLock:
    """The lock file of one agent's sockets; `take` raises AlreadyRunning naming who holds it."""

    def __init__(self, path: Path, mode: int, *, agent: str, serves: Path, sockets: str = "socket") -> None:
        self.path = path
        self.agent = agent  # "device plugin", "DRA driver"
        self.serves = serves
        self.sockets = sockets  # how the message names what two instances would delete
        self._lock = socketfiles.InstanceLock(path, mode)

    def take(self) -> None:
        if not self._lock.acquire():
            raise AlreadyRunning(
                f"another gpushare {self.agent} serves {self.serves} (it holds {self.path}); "
                f"stop it first: two instances would delete each other's {self.sockets}"
            )

    def release(self) -> None:
        self._lock.release()


def serve(
    path: Path, add: Callable[[grpc.Server], None], *, workers: int, prefix: str, shorter: str = ""
) -> grpc.Server:
    """A started gRPC server on the unix socket `path` with the services `add` puts on it. `shorter`
    names the flag that shortens a path over the kernel's limit, the usual reason a bind fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # a stale socket from a previous run
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=prefix))
    add(srv)
    try:
        srv.add_insecure_port(f"unix://{path}")
    except RuntimeError:
        # gRPC only says "Failed to bind".
        size = len(os.fsencode(path))
        raise OSError(
            f"cannot create the socket {path} ({size} bytes; a unix socket path holds at most "
            f"{MAX_SOCKET_PATH}): use a shorter {shorter}"
            if shorter and size > MAX_SOCKET_PATH
            else f"cannot create the socket {path}"
        ) from None
    srv.start()
    return srv


def stop(srv: grpc.Server, grace_s: float) -> None:
    """Stop `srv`, calls in progress given `grace_s`; wait a little longer for its threads."""
    srv.stop(grace_s).wait(grace_s + 5)
