"""Render the chart with the helm binary (installed by scripts/install-helm into .tools/bin) for the tests."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import yaml

from webhook.devcluster.helm import CHART, ROOT
from webhook.devcluster.helm import binary as helm_binary

__all__ = ["CHART", "ROOT", "helm_binary"]
RELEASE = "gs"
NAMESPACE = "gpu-system"
KUBE_VERSION = "1.36.3"  # the end-to-end suite's kube-apiserver


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    binary = helm_binary()
    if binary is None:
        raise RuntimeError("helm not found: run `bash scripts/install-helm`")
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60, check=check)


def render(values: dict[str, Any] | None = None, *extra: str) -> list[dict[str, Any]]:
    """`helm template` with the given values (as one JSON --values file) -> the rendered objects."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION, *extra]
    args += _set_args(values or {})
    result = helm(*args, check=False)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def render_error(values: dict[str, Any]) -> str:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    result = helm(*args, *_set_args(values), check=False)
    assert result.returncode != 0, "expected helm template to fail"
    return result.stderr


def find(objects: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(name_suffix)]
    assert len(matches) == 1, (
        f"expected one {kind} *{name_suffix}, got {[m['metadata']['name'] for m in matches]}"
    )
    return matches[0]


def _set_args(values: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, value in _flatten(values).items():
        out += ["--set-json", f"{key}={json.dumps(value)}"]
    return out


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    # Nested dicts become dotted keys so a test overrides one leaf without replacing its siblings.
    out: dict[str, Any] = {}
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, path + "."))
        else:
            out[path] = value
    return out
