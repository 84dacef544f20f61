"""What the watch tests share: a loop on a thread of its own (as the extender's server runs one), a
minimal cache fed by a watcher, and fast watch settings."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import uvloop

from webhook.kube import asyncdirect, watch

FAST = watch.WatchSettings(timeout_seconds=30, page_size=2, backoff=watch.Backoff(initial=0.02, maximum=0.1))


class Loop:
    """uvloop running on a thread of its own, as the extender's server runs it; `clients` are closed on
    it before it closes (as the extender's app closes its client when it stops)."""

    def __init__(self) -> None:
        self.clients: list[asyncdirect.AsyncDirectClient] = []
        self.loop = uvloop.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test loop", daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.loop.is_closed():
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for client in self.clients:
                client.close()
            await asyncio.sleep(0.01)  # the aborted transports close

        asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class Mirror:
    """A minimal cache fed by the watcher: name -> object, replaced on RESYNC."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[str, str]] = []
        self.listed: list[tuple[int, int]] = []  # per RESYNC: (its listed_ns, when it arrived)
        self.lock = threading.Lock()

    def __call__(self, event: watch.WatchEvent) -> None:
        with self.lock:
            if event.type == watch.RESYNC:
                self.listed.append((event.listed_ns, time.monotonic_ns()))
                self.objects = {o["metadata"]["name"]: o for o in event.objects}
                self.log.append(("RESYNC", ",".join(sorted(self.objects))))
                return
            assert event.object is not None
            name = event.object["metadata"]["name"]
            self.log.append((event.type, name))
            if event.type == watch.DELETED:
                self.objects.pop(name, None)
            else:
                self.objects[name] = event.object

    def names(self) -> list[str]:
        with self.lock:
            return sorted(self.objects)

    def changes(self) -> list[tuple[str, str]]:
        with self.lock:
            return [e for e in self.log if e[0] != "RESYNC"]
