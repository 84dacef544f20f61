"""In-memory object store of the Kubernetes API stand-in (see webhook/devcluster/standin/apiserver.py).

One global, monotonically increasing resourceVersion; a per-resource change history that watches read
and `compact()` trims. Stored objects are never mutated after they are stored (every write builds a new
dict and shares untouched subtrees), so readers may serialise them without copying.
"""

from __future__ import annotations

import bisect
import copy
import threading
import uuid
from collections.abc import Iterable
from typing import Any

import jsonpatch

from webhook.devcluster.standin.apiwire import (
    BY_PLURAL,
    JSON_PATCH,
    MERGE_PATCH,
    RESOURCES,
    STALE,
    ApiStatusError,
    Change,
    Filter,
    Key,
    Obj,
    ResourceType,
    conflict,
    merge_patch,
    now_rfc3339,
    success_status,
)


class Store:
    """Objects by resource, the global resourceVersion and the per-resource change history."""

    def __init__(self, history_limit: int = 200_000) -> None:
        self.cond = threading.Condition()
        self.rv = 100  # never "0": a list rv of "0" would mean "any" to a watch
        self.history_limit = history_limit
        self.objects: dict[str, dict[Key, Obj]] = {r.plural: {} for r in RESOURCES}
        self.history: dict[str, list[Change]] = {r.plural: [] for r in RESOURCES}
        # Changes with rv <= floor[resource] are gone: a watch from an older rv gets 410.
        self.floor: dict[str, int] = {r.plural: 0 for r in RESOURCES}

    # --- bookkeeping (callers hold self.cond) ---

    def _commit(self, rt: ResourceType, key: Key, new: Obj | None, kind: str, old: Obj | None) -> Obj:
        self.rv += 1
        rv = str(self.rv)
        if new is None:  # deletion: the final object carries the deletion's resourceVersion
            assert old is not None
            final = {**old, "metadata": {**old["metadata"], "resourceVersion": rv}}
            del self.objects[rt.plural][key]
        else:
            final = {**new, "metadata": {**new["metadata"], "resourceVersion": rv}}
            self.objects[rt.plural][key] = final
        history = self.history[rt.plural]
        history.append(Change(self.rv, kind, final, old))
        if len(history) > self.history_limit:
            drop = len(history) - self.history_limit // 2
            self.floor[rt.plural] = history[drop - 1].rv
            del history[:drop]
        self.cond.notify_all()
        return final

    def _get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.objects[rt.plural].get((namespace, name))
        if obj is None:
            raise ApiStatusError(
                404, f'{rt.plural} "{name}" not found', "NotFound", {"name": name, "kind": rt.plural}
            )
        return obj

    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> Key:
        return (namespace or "" if rt.namespaced else "", name)

    # --- verbs ---

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        with self.cond:
            return self._get(rt, *self._key(rt, namespace, name))

    def list_objects(
        self, rt: ResourceType, flt: Filter, limit: int = 0, cont: str = ""
    ) -> tuple[list[Obj], int, str]:
        with self.cond:
            items = [o for o in self.objects[rt.plural].values() if flt.matches(o)]
            rv = self.rv
        if limit <= 0 and not cont:
            return items, rv, ""
        # Paging over a sorted view of the current state (not a snapshot: enough for a stand-in).
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        keys = [f"{o['metadata'].get('namespace', '')}/{o['metadata']['name']}" for o in items]
        start = bisect.bisect_right(keys, cont) if cont else 0
        page = items[start : start + limit] if limit > 0 else items[start:]
        more = limit > 0 and start + limit < len(items)
        return page, rv, keys[start + limit - 1] if more else ""

    def create(self, rt: ResourceType, namespace: str | None, body: Obj) -> Obj:
        if not isinstance(body, dict):
            raise ApiStatusError(400, "the body of the request was not a JSON object")
        meta = dict(body.get("metadata") or {})
        if rt.namespaced:
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiStatusError(
                    400,
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiStatusError(
                    422,
                    f"{rt.kind} is invalid: metadata.name: Required value: name or generateName is required",
                    "Invalid",
                )
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if meta.get("resourceVersion"):
            raise ApiStatusError(500, "resourceVersion should not be set on objects to be created")
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        meta.pop("deletionTimestamp", None)
        obj: Obj = {**body, "apiVersion": rt.api_version, "kind": rt.kind, "metadata": meta}
        if rt.plural == "pods":
            obj["status"] = {"phase": "Pending", **(body.get("status") or {})}
        key = self._key(rt, namespace, meta["name"])
        with self.cond:
            if key in self.objects[rt.plural]:
                raise ApiStatusError(
                    409,
                    f'{rt.plural} "{meta["name"]}" already exists',
                    "AlreadyExists",
                    {"name": meta["name"], "kind": rt.plural},
                )
            return self._commit(rt, key, obj, "ADDED", None)

    def _replace(self, rt: ResourceType, key: Key, old: Obj, new: Obj, *, sub: str, precondition: str) -> Obj:
        """Shared tail of update and patch: preconditions, subresource rules, immutable fields."""
        if precondition and precondition != old["metadata"]["resourceVersion"]:
            raise conflict(rt, key[1], STALE)
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            raise ApiStatusError(400, "metadata must be an object")
        if meta.get("name", key[1]) != key[1]:
            raise ApiStatusError(400, "the name of the object does not match the name on the URL")
        keep = {
            k: old["metadata"][k]
            for k in ("uid", "creationTimestamp", "namespace", "name")
            if k in old["metadata"]
        }
        if "deletionTimestamp" in old["metadata"]:
            keep["deletionTimestamp"] = old["metadata"]["deletionTimestamp"]
        new = {**new, "apiVersion": rt.api_version, "kind": rt.kind, "metadata": {**meta, **keep}}
        if sub == "status":  # the status subresource changes status only (spec from the old object)
            new = {**old, "status": new.get("status"), "metadata": old["metadata"]}
        elif rt.has_status:  # the main resource ignores status changes, as the real strategies do
            new = {k: v for k, v in new.items() if k != "status"}
            if "status" in old:
                new["status"] = old["status"]
        # Removing the last finalizer of an object being deleted completes the deletion; a pod in its
        # graceful-deletion period (deletionTimestamp, no finalizers) stays until removed directly.
        finalizing = old["metadata"].get("finalizers") and not new["metadata"].get("finalizers")
        if finalizing and new["metadata"].get("deletionTimestamp"):
            return self._commit(rt, key, None, "DELETED", old)
        return self._commit(rt, key, new, "MODIFIED", old)

    def update(self, rt: ResourceType, namespace: str | None, name: str, body: Obj, *, sub: str = "") -> Obj:
        if not isinstance(body, dict):
            raise ApiStatusError(400, "the body of the request was not a JSON object")
        key = self._key(rt, namespace, name)
        with self.cond:
            old = self._get(rt, *key)
            precondition = str((body.get("metadata") or {}).get("resourceVersion") or "")
            return self._replace(rt, key, old, body, sub=sub, precondition=precondition)

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        content_type: str,
        sub: str = "",
    ) -> Obj:
        key = self._key(rt, namespace, name)
        with self.cond:
            old = self._get(rt, *key)
            if content_type in MERGE_PATCH:
                if not isinstance(body, dict):
                    raise ApiStatusError(400, "merge patch body must be a JSON object")
                precondition = str((body.get("metadata") or {}).get("resourceVersion") or "")
                new = merge_patch(old, body)
            elif content_type == JSON_PATCH:
                if not isinstance(body, list):
                    raise ApiStatusError(
                        400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch"
                    )
                try:
                    new = jsonpatch.apply_patch(old, body, in_place=False)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError) as exc:
                    if isinstance(exc, jsonpatch.JsonPatchTestFailed):
                        raise conflict(
                            rt, name, f"the server rejected our request due to an error in our request: {exc}"
                        ) from exc
                    raise ApiStatusError(
                        422,
                        f"the server rejected our request due to an error in our request: {exc}",
                        "Invalid",
                    ) from exc
                precondition = str(new.get("metadata", {}).get("resourceVersion") or "")
            else:
                raise ApiStatusError(
                    415,
                    f"the body of the request was in an unknown format - accepted "
                    f"media types include: {JSON_PATCH}, "
                    f"{', '.join(MERGE_PATCH)}",
                )
            return self._replace(rt, key, old, new, sub=sub, precondition=precondition)

    def delete(self, rt: ResourceType, namespace: str | None, name: str, options: Obj | None) -> Obj:
        key = self._key(rt, namespace, name)
        pre = (options or {}).get("preconditions") or {}
        with self.cond:
            old = self._get(rt, *key)
            meta = old["metadata"]
            check_preconditions(rt, name, meta, pre.get("uid"), pre.get("resourceVersion"))
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return old
                marked = {**old, "metadata": {**meta, "deletionTimestamp": now_rfc3339()}}
                return self._commit(rt, key, marked, "MODIFIED", old)
            return self._commit(rt, key, None, "DELETED", old)

    def bind(self, namespace: str, name: str, binding: Any) -> Obj:
        """pods/binding create, as `BindingREST.Create` (pkg/registry/core/pod/storage)."""
        rt = BY_PLURAL["pods"]
        if not isinstance(binding, dict):
            raise ApiStatusError(400, "the body of the request was not a JSON object")
        bmeta = binding.get("metadata") or {}
        if bmeta.get("name") != name:
            raise ApiStatusError(400, "name in URL does not match name in Binding object")
        target = binding.get("target") or {}
        if target.get("kind", "") not in ("", "Node"):
            raise ApiStatusError(
                422,
                f'Binding.core "{name}" is invalid: target.kind: Unsupported value: '
                f'"{target.get("kind")}": supported values: "Node", "<empty>"',
                "Invalid",
            )
        if not target.get("name"):
            raise ApiStatusError(
                422, f'Binding.core "{name}" is invalid: target.name: Required value', "Invalid"
            )
        key = (namespace, name)
        with self.cond:
            pod = self._get(rt, *key)
            meta = pod["metadata"]
            check_preconditions(rt, name, meta, bmeta.get("uid"), bmeta.get("resourceVersion"))
            binding_rt = ResourceType("pods/binding", "Binding", "", "v1", True)
            spec = pod.get("spec") or {}
            if meta.get("deletionTimestamp"):
                raise conflict(binding_rt, name, f"pod {name} is being deleted, cannot be assigned to a host")
            if spec.get("nodeName"):
                raise conflict(
                    binding_rt, name, f'pod {name} is already assigned to node "{spec["nodeName"]}"'
                )
            if spec.get("schedulingGates"):
                raise conflict(binding_rt, name, f"pod {name} has non-empty .spec.schedulingGates")
            annotations = {**(meta.get("annotations") or {}), **(bmeta.get("annotations") or {})}
            status = dict(pod.get("status") or {})
            condition = {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(),
            }
            status["conditions"] = [
                *(c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"),
                condition,
            ]
            new = {
                **pod,
                "metadata": {**meta, "annotations": annotations},
                "spec": {**spec, "nodeName": target["name"]},
                "status": status,
            }
            self._commit(rt, key, new, "MODIFIED", pod)
        return success_status(201)

    # --- watch support ---

    def changes_after(self, plural: str, rv: int) -> tuple[list[Change], int] | None:
        """Changes with rv > `rv` and the current global rv; None when some were compacted away."""
        if rv < self.floor[plural]:
            return None
        history = self.history[plural]
        start = bisect.bisect_right(history, rv, key=lambda c: c.rv)
        return history[start:], self.rv

    def compact(self) -> int:
        """Forget all history: every watch or resume from an older resourceVersion gets 410."""
        with self.cond:
            for plural in self.history:
                self.history[plural].clear()
                self.floor[plural] = self.rv
            self.cond.notify_all()
            return self.rv

    # --- direct access for tests (no API semantics beyond bookkeeping) ---

    def put(self, obj: Obj) -> Obj:
        """Create or replace `obj` as given (status included); fills uid/creationTimestamp if missing."""
        rt = next((r for r in RESOURCES if r.kind == obj.get("kind")), None)
        if rt is None:
            raise ValueError(f"stand-in does not serve kind {obj.get('kind')!r}")
        meta = dict(obj.get("metadata") or {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_rfc3339())
        if rt.namespaced:
            meta.setdefault("namespace", "default")
        key = self._key(rt, meta.get("namespace"), meta["name"])
        new = {**copy.deepcopy(obj), "apiVersion": rt.api_version, "metadata": meta}
        with self.cond:
            old = self.objects[rt.plural].get(key)
            return self._commit(rt, key, new, "MODIFIED" if old else "ADDED", old)

    def edit(self, plural: str, namespace: str | None, name: str, patch: Obj) -> Obj:
        """Merge-patch an object directly (any field, status included)."""
        rt = BY_PLURAL[plural]
        key = self._key(rt, namespace, name)
        with self.cond:
            old = self._get(rt, *key)
            return self._commit(rt, key, merge_patch(old, patch), "MODIFIED", old)

    def remove(self, plural: str, namespace: str | None, name: str) -> None:
        rt = BY_PLURAL[plural]
        key = self._key(rt, namespace, name)
        with self.cond:
            self._commit(rt, key, None, "DELETED", self._get(rt, *key))

    def all(self, plural: str, namespace: str | None = None) -> list[Obj]:
        with self.cond:
            objs: Iterable[Obj] = list(self.objects[plural].values())
        return [
            copy.deepcopy(o) for o in objs if namespace is None or o["metadata"].get("namespace") == namespace
        ]


def check_preconditions(rt: ResourceType, name: str, meta: Obj, uid: Any, resource_version: Any) -> None:
    """Delete options' and a Binding's UID / resourceVersion preconditions, with the server's 409 text."""
    if uid and uid != meta["uid"]:
        raise conflict(
            rt, name, f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta['uid']}"
        )
    if resource_version and resource_version != meta["resourceVersion"]:
        raise conflict(
            rt,
            name,
            f"Precondition failed: ResourceVersion in precondition: {resource_version}, "
            f"ResourceVersion in object meta: {meta['resourceVersion']}",
        )
