"""The committed gRPC stubs of the device plugin and the DRA driver equal what scripts/gen-proto makes from
the .proto files (one generation for both)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = (
    "deviceplugin/v1beta1",
    "deviceplugin/podresources/v1",
    "dra/v1",
    "dra/v1beta1",
    "dra/pluginregistration/v1",
    "dra/health/v1alpha1",
)
GENERATED = [f"webhook/{d}/{n}" for d in FOLDERS for n in ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")]


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen")
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen-proto"), str(out)],
        check=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    return out


@pytest.mark.parametrize("name", GENERATED, ids=GENERATED)
def test_regenerating_the_stubs_gives_identical_files(regenerated: Path, name: str) -> None:
    assert (regenerated / name).read_bytes() == (ROOT / name).read_bytes()
