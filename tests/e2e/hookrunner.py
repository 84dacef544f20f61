"""Plays the kubelet for the chart's Helm hook Jobs in end-to-end tests: no kubelet runs here, so each
Job's containers run on this host with the Job's own arguments, and the Job is marked complete or failed,
so `helm install` and `helm upgrade` go through their hooks against the real API server."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from webhook.devcluster import release
from webhook.kube import errors, rest


class HookRunner:
    """Plays the kubelet for the chart's hook Jobs: runs each container's `gpushare` arguments on this
    host (KUBECONFIG: admin) and marks the Job complete, or failed with the output."""

    def __init__(
        self,
        api: Any,
        kubeconfig: Path,
        namespace: str,
        before: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.api = api
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.before = before  # called with each Job before its containers run (what a test checks then)
        self.errors: list[str] = []
        self._done: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        path = rest.path("jobs", namespace=self.namespace, group="batch")
        while not self._stop.wait(0.2):
            try:
                jobs = list(rest.list_all(self.api, path))
            except Exception:  # the namespace may not exist yet
                continue
            for job in jobs:
                uid = job["metadata"]["uid"]
                if uid not in self._done and not job.get("status", {}).get("conditions"):
                    self._done.add(uid)
                    self._run(job)

    def _run(self, job: dict[str, Any]) -> None:
        if self.before is not None:
            try:
                self.before(job)
            except Exception as err:  # an AssertionError: the test reads it from `errors`
                self.errors.append(f"before hook {job['metadata']['name']}: {err}")
        ok = True
        for container in job["spec"]["template"]["spec"]["containers"]:
            argv = container.get("command") or [release.GPUSHARE]
            env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "POD_NAMESPACE": self.namespace}
            result = subprocess.run(
                [*argv, *container.get("args", [])],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if result.returncode != 0:
                ok = False
                self.errors.append(f"hook {job['metadata']['name']}/{container['name']}: {result.stderr}")
        name = job["metadata"]["name"]
        try:
            self._mark(name, ok)
        except Exception as err:
            self.errors.append(f"marking hook Job {name}: {err}")

    def _mark(self, name: str, ok: bool) -> None:
        """Finish the Job's status as its controller would. kube-controller-manager's Job controller
        writes the same status meanwhile (its start time, the pod it made, which no kubelet runs): start
        from the stored status, keep its start time (the API server refuses a change), count no pod
        active, and write again on a conflict."""
        path = rest.path("jobs", name, self.namespace, group="batch")
        for _ in range(20):
            job = rest.request(self.api, "GET", path)
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            kinds = ["SuccessCriteriaMet", "Complete"] if ok else ["FailureTarget", "Failed"]
            status = job.get("status") or {}
            job["status"] = {
                **status,
                "startTime": status.get("startTime") or now,
                "active": 0,
                "ready": 0,
                "terminating": 0,
                "uncountedTerminatedPods": {},
                **({"completionTime": now, "succeeded": 1} if ok else {"failed": 1}),
                "conditions": [
                    *(status.get("conditions") or []),
                    *(
                        {"type": kind, "status": "True", "lastProbeTime": now, "lastTransitionTime": now}
                        for kind in kinds
                    ),
                ],
            }
            try:
                rest.request(self.api, "PUT", path + "/status", body=job)
                return
            except errors.ConflictError:
                time.sleep(0.1)
        raise RuntimeError("still conflicting after 20 writes")
