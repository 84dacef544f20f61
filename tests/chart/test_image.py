"""What the Dockerfile does, without Docker: build the wheel, install it into a fresh virtualenv, run it.

The image's build stage runs `pip wheel` on the source and `pip install` of that wheel into /opt/gpushare;
here the fresh venv gets the same wheel (no dependencies from the network: it sees the pinned packages of
.venv through a path entry, without .venv's editable install) and every entry point must answer --help.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from tests.chart import render
from webhook.cli import main as cli_main

ROOT = render.ROOT
pytestmark = pytest.mark.slow


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("image")
    src = work / "src"
    # Exactly what the Dockerfile copies.
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, src / name)
        else:
            pytest.fail(f"{name} is missing: the Dockerfile COPYs it and pyproject's readme names it")
    shutil.copytree(ROOT / "webhook", src / "webhook", ignore=shutil.ignore_patterns("__pycache__"))
    dist = work / "dist"
    built = _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        dist,
        src,
        cwd=work,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("*.whl")
    venv = work / "venv"
    made = _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=work)
    assert made.returncode == 0, made.stderr
    py = venv / "bin" / "python"
    site = Path(
        _run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=work).stdout.strip()
    )
    # Dependencies: the pinned ones already installed in .venv (no network here); a plain path entry does
    # not run .venv's own .pth files, so its editable `webhook` stays out of sight.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        py,
        "install",
        "-q",
        "--no-deps",
        "--no-index",
        wheel,
        cwd=work,
    )
    assert installed.returncode == 0, installed.stderr
    return venv, wheel


def test_wheel_requirements_are_exact_pins_satisfied_by_the_tested_versions(
    image_venv: tuple[Path, Path],
) -> None:
    _, wheel = image_venv
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
        names = zf.namelist()
    runtime = [
        line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")
    ]
    runtime = [r for r in runtime if "extra ==" not in r]
    assert runtime
    for requirement in runtime:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([A-Za-z0-9_.+-]+)", requirement)
        assert match, f"not an exact pin: {requirement}"
        assert metadata.version(match[1]) == match[2]
    assert any(n.endswith("deviceplugin/v1beta1/api_pb2_grpc.py") for n in names), "gRPC stubs not packaged"
    assert "webhook/py.typed" in names


def test_installed_entry_points_answer_help_from_the_fresh_venv(
    image_venv: tuple[Path, Path], tmp_path: Path
) -> None:
    venv, _ = image_venv
    gpushare = venv / "bin" / "gpushare"
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    where = _run(
        venv / "bin" / "python",
        "-c",
        "import webhook, json; print(json.dumps(webhook.__file__))",
        cwd=tmp_path,
        env=env,
    )
    assert where.returncode == 0, where.stderr
    assert json.loads(where.stdout).startswith(str(venv)), (
        "the venv must import the installed wheel, not the repo"
    )
    top = _run(gpushare, "--help", cwd=tmp_path, env=env)
    assert top.returncode == 0, top.stderr
    for command in cli_main.COMMANDS:
        result = _run(gpushare, command, "--help", cwd=tmp_path, env=env)
        assert result.returncode == 0, f"gpushare {command} --help: {result.stderr}"
        assert "usage:" in result.stdout
    grpc_stub = _run(
        venv / "bin" / "python",
        "-c",
        "import webhook.deviceplugin.v1beta1.api_pb2_grpc",
        cwd=tmp_path,
        env=env,
    )
    assert grpc_stub.returncode == 0, grpc_stub.stderr


def test_dockerfile_builds_the_same_way_and_runs_as_non_root() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\} AS build$", dockerfile, re.M)
    assert "pip wheel --no-deps --no-build-isolation" in dockerfile
    assert "scripts/gen-proto" in dockerfile
    assert re.search(r"^USER 65532:65532$", dockerfile, re.M)
    assert re.search(r'^ENTRYPOINT \["gpushare"\]$', dockerfile, re.M)
    image = re.search(r"^ARG PYTHON_IMAGE=python:(\S+)$", dockerfile, re.M)
    assert image and "slim" in image[1]
    values_user = render.render()[0]  # any object: chart renders
    assert values_user
    assert os.path.exists(ROOT / ".dockerignore")
