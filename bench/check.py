"""Benchmark `gpushare check`: 10,000 manifests as one `helm template` stream and as 10,000 files.

Reference in the same run: parsing the same YAML with PyYAML's C loader alone (the floor any YAML-based
checker pays), and a bare `python -c pass` for start-up. Run: `.venv/bin/python bench/check.py [N]`.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from webhook.cli import check  # noqa: E402
from webhook.core.admission import verdict  # noqa: E402

DEPLOYMENT = """---
# Source: trainer/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: trainer-{i}
  namespace: ml-{ns}
  labels: {{app.kubernetes.io/name: trainer, app.kubernetes.io/instance: r{i}, helm.sh/chart: trainer-0.3.1}}
spec:
  replicas: 2
  selector:
    matchLabels: {{app.kubernetes.io/name: trainer, app.kubernetes.io/instance: r{i}}}
  template:
    metadata:
      labels: {{app.kubernetes.io/name: trainer, app.kubernetes.io/instance: r{i}}}
      annotations: {{prometheus.io/scrape: "true"}}
    spec:
      containers:
        - name: trainer
          image: registry.example.com/ml/trainer:1.4.0
          args: ["--epochs", "10", "--batch-size", "64"]
          env:
            - {{name: LOG_LEVEL, value: info}}
          ports:
            - {{containerPort: 8080, name: http}}
          resources:
            limits: {{aliyun.com/gpu-mem: {mem}, cpu: "2", memory: 8Gi}}
            requests: {{cpu: "1", memory: 4Gi}}
          volumeMounts:
            - {{name: data, mountPath: /data}}
      volumes:
        - name: data
          persistentVolumeClaim: {{claimName: data-{i}}}
"""
SERVICE = """---
# Source: trainer/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: trainer-{i}
  namespace: ml-{ns}
spec:
  ports: [{{port: 8080, targetPort: http, name: http}}]
  selector: {{app.kubernetes.io/instance: r{i}}}
"""
JOB = """---
# Source: trainer/templates/job.yaml
apiVersion: batch/v1
kind: Job
metadata:
  name: warmup-{i}
  namespace: ml-{ns}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: warmup
          image: registry.example.com/ml/trainer:1.4.0
          resources:
            limits: {{nvidia.com/gpu: "0.5"}}
"""


def manifests(n: int) -> list[str]:
    """A Helm-like mix: 60% GPU Deployments, 30% Services, 10% Jobs with a fractional GPU."""
    out = []
    for i in range(n):
        kind = DEPLOYMENT if i % 10 < 6 else SERVICE if i % 10 < 9 else JOB
        out.append(kind.format(i=i, ns=i % 7, mem=1 + i % 8))
    return out


def timed(fn: object, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    docs = manifests(n)
    text = "".join(docs)
    policy = verdict.Policy()
    print(f"{n} manifests, {len(text) / 1e6:.1f} MB, libyaml: {yaml.__with_libyaml__}")

    parse = timed(lambda: sum(1 for _ in yaml.load_all(text, Loader=yaml.CSafeLoader)))
    stream = timed(lambda: check.check_paths(["-"], policy, stdin=io.BytesIO(text.encode())))
    found = check.check_paths(["-"], policy, stdin=io.BytesIO(text.encode()))
    assert found.objects == n and found.denied == n // 10, (found.objects, found.denied)

    with tempfile.TemporaryDirectory() as tmp:
        for i, doc in enumerate(docs):
            sub = Path(tmp, f"app{i % 50}")
            sub.mkdir(exist_ok=True)
            (sub / f"m{i}.yaml").write_text(doc)
        files = timed(lambda: check.check_paths([tmp], policy))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        cli = [sys.executable, "-m", "webhook.cli.main", "check", "-q", "-o", "json"]
        start = time.perf_counter()
        done = subprocess.run([*cli, tmp], capture_output=True, env=env, check=False)
        end_to_end = time.perf_counter() - start
        assert done.returncode == 1, done.stderr
        one = Path(tmp, "app0", "m0.yaml")
        startup = timed(lambda: subprocess.run([*cli, str(one)], capture_output=True, env=env, check=True), 3)
        bare = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), 3)

    rows = [
        ("YAML parse only (CSafeLoader, reference)", parse),
        ("check: one stream (stdin)", stream),
        (f"check: {n} files in 50 directories", files),
        ("gpushare check <dir>: whole process", end_to_end),
    ]
    for label, seconds in rows:
        print(f"{label:<44} {seconds:7.2f} s  {n / seconds:9.0f} manifests/s  {seconds / parse:5.2f}x parse")
    label = "start-up: gpushare check on one file"
    print(f"{label:<44} {startup * 1000:7.0f} ms ({startup / bare:.1f}x bare python)")


if __name__ == "__main__":
    main()
